package cli

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/cmdline"
	"github.com/better-compute/better-compute/registry/api"
)

var tokenCommands = []command{{
	path:    "tokens create",
	usage:   "--kind provisioned|ramdisk|site [--node-id ID] [--site S] [--ttl 24h] [--out FILE [--force]]",
	summary: "mint a single-use join token for one agent; its secret is shown (or written) only now",
	long:    "mint a single-use join token; its secret is printed, or written to `--out FILE`, only now. FILE is written whole, mode 0600, and must be new unless `--force`; it is checked before the token is minted, and a write that fails after that revokes the token again. `--ttl` is whole seconds: `90s`, `30m`, `24h`, or a bare number of seconds",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		kind := new(string)
		fs.Var(cmdline.OneOf(kind, api.TokenKinds()), "kind", strings.Join(api.TokenKinds(), ", ")+" (required)")
		nodeID := fs.String("node-id", "", "the node the token admits (a site token's is the site's name, which it defaults to)")
		site := fs.String("site", "", "the site (required for a site token)")
		ttl := &secondsFlag{}
		fs.Var(ttl, "ttl", "lifetime in whole seconds, like 5s, 90m or 24h; a bare number is seconds (default: provisioned 2h, ramdisk 1h, site 24h)")
		out := outFlags(fs, "write the token secret to this file, 0600, instead of printing it; a new file unless --force")
		return func(x *exec) error {
			switch {
			case *kind == "site" && *site == "":
				return cmdline.Usagef("--site", "tokens create --kind site needs --site S: the site whose agent the token admits")
			case *kind != "site" && *nodeID == "":
				return cmdline.Usagef("--node-id", "tokens create --kind %s needs --node-id ID: the node the token admits", *kind)
			}
			switch {
			case *out.path != "":
				if err := out.check(); err != nil {
					return err
				}
			case *out.force:
				return cmdline.Usagef("--force", "--force goes with --out FILE: it lets that file replace one that exists")
			}
			c, err := x.client()
			if err != nil {
				return err
			}
			req := api.CreateTokenRequest{Kind: *kind, NodeID: *nodeID, Site: *site, TTLSeconds: int64(ttl.d / time.Second)}
			var made api.CreatedToken
			if err := c.Call(x.ctx, "tokens.create", req, &made); err != nil {
				return x.interrupted("tokens.create", err)
			}
			if *out.path != "" {
				if err := out.write([]byte(made.Secret + "\n")); err != nil {
					return revokeMinted(x, c, "join token", made.ID, "tokens.revoke", api.RevokeTokenRequest{ID: made.ID}, err)
				}
				made.Secret = "" // shown only in the file
			}
			row := struct {
				api.CreatedToken
				Out string `json:"out,omitempty"`
			}{made, *out.path}
			x.print(row, func(w *tabwriter.Writer) {
				tokenTable(w, []api.Token{made.Token})
				if *out.path != "" {
					fmt.Fprintf(w, "\nthe token secret is in %s; it is not shown again\n", *out.path)
				} else {
					fmt.Fprintf(w, "\ntoken (shown only now): %s\n", made.Secret)
				}
			})
			return nil
		}
	},
}, {
	path:    "tokens revoke",
	usage:   "ID",
	summary: "revoke an unused join token: no agent joins with it from now on",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		return func(x *exec) error {
			var out api.Token
			if err := x.call("tokens.revoke", api.RevokeTokenRequest{ID: x.args[0]}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				tokenTable(w, []api.Token{out})
				fmt.Fprintln(w, "\nrevoked: no agent joins with it from now on")
			})
			return nil
		}
	},
}, {
	path:    "tokens list",
	usage:   "[--cursor C]",
	summary: "list join tokens (never their secrets)",
	long:    "list join tokens: id, kind, node, site, expiry, when used and from which address (FROM, usedFrom in JSON), and in JSON the workflow that minted it (workflow, absent for a token an operator minted); never the secret",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		cursor := fs.String("cursor", "", "resume after a previous page")
		return func(x *exec) error {
			var out api.TokenList
			if err := x.call("tokens.list", api.ListRequest{Cursor: *cursor}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				tokenTable(w, out.Tokens)
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}}

// secondsFlag is a lifetime in whole seconds: a duration such as 5s, 90m or 24h, or a bare
// number of seconds.
type secondsFlag struct{ d time.Duration }

func (f *secondsFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if n, ok := cmdline.ParseDecimal(s); ok && n <= int64(math.MaxInt64/time.Second) {
		d, err = time.Duration(n)*time.Second, nil
	}
	if err != nil || d <= 0 || d%time.Second != 0 {
		return errors.New("give a lifetime in whole seconds, like 5s, 90m or 24h (a bare number is seconds)")
	}
	f.d = d
	return nil
}

func (f *secondsFlag) String() string {
	if f.d == 0 {
		return ""
	}
	return f.d.String()
}

// Type names the value in help.
func (f *secondsFlag) Type() string { return "duration" }

func tokenTable(w *tabwriter.Writer, rows []api.Token) {
	fmt.Fprintln(w, "ID\tKIND\tNODE\tSITE\tEXPIRES\tUSED\tFROM")
	for _, t := range rows {
		used := "no"
		if !t.UsedAt.IsZero() {
			used = t.UsedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Kind, t.NodeID, dash(t.Site), t.ExpiresAt.Format(time.RFC3339), used, dash(t.UsedFrom))
	}
}
