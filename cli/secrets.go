package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

var secretCommands = []command{{
	path:    "secrets put",
	usage:   "--ref secret://NAME --file FILE|- [--tenant T]",
	summary: "store (or replace) a secret of the tenant that node agents whose host units name it get, such as a k8s-join tokenRef; never shown again",
	long: "store or replace a secret of the tenant (at most 64 KiB, byte for byte; `-` reads standard " +
		"input: from a terminal, after a prompt on standard error, up to a Ctrl-D on a line of its own, the " +
		"newline before it part of the value, and shown on the screen as typed, which `--file FILE` avoids; " +
		"a Ctrl-C ends it, nothing sent; the CLI config is read before the value is asked for), sealed at rest; only a node agent whose NodeSpec's host units name it (a " +
		"`k8s-join` `tokenRef`) gets it (docs/host-config.md), or, as a BMC login `{\"username\", " +
		"\"password\"}`, the site agent with each BMC command of a node whose `bmc.credentialRef` " +
		"names it (docs/bmc.md). A new secret past the tenant's bound (serve `--tenant-secrets`) is " +
		"`INVALID_STATE` reason `quota` until the tenant deletes one (docs/security.md#what-a-tenant-may-hold-in-the-store)",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant the secret belongs to (default: the caller's)")
		ref := fs.String("ref", "", "the secret's name, secret://... as units name it (required)")
		file := fs.String("file", "", "file holding the value, taken byte for byte; - reads standard input (required)")
		return func(x *exec) error {
			// The config first: a value typed at a terminal is not asked for by a command
			// that cannot send it.
			if _, err := x.config(); err != nil {
				return err
			}
			value, err := readSecret(x, *file, *ref)
			if err != nil {
				return err
			}
			var out api.PutSecret
			if err := x.call("secrets.put", api.PutSecretRequest{TenantID: *tenant, Ref: *ref, Value: value}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				secretTable(w, []api.Secret{out.Secret})
				if out.Replaced {
					fmt.Fprintln(w, "\nthe new value replaced the secret's earlier one")
				}
			})
			return nil
		}
	},
}, {
	path:    "secrets list",
	usage:   "[--tenant T] [--cursor C]",
	summary: "list the tenant's secrets (names and times, never values)",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant whose secrets to list (default: the caller's)")
		cursor := fs.String("cursor", "", "resume after a previous page")
		return func(x *exec) error {
			var out api.SecretList
			if err := x.call("secrets.list", api.ListSecretsRequest{TenantID: *tenant, ListRequest: api.ListRequest{Cursor: *cursor}}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				secretTable(w, out.Secrets)
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}, {
	path:    "secrets delete",
	usage:   "--ref secret://NAME [--tenant T]",
	summary: "delete a secret of the tenant; nodes that name it no longer get it",
	long:    "delete a secret of the tenant; nodes naming it get `NOT_FOUND`",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant the secret belongs to (default: the caller's)")
		ref := fs.String("ref", "", "the secret's name (required)")
		return func(x *exec) error {
			var out api.DeletedSecret
			if err := x.call("secrets.delete", api.SecretRequest{TenantID: *tenant, Ref: *ref}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { fmt.Fprintf(w, "deleted %s of tenant %s\n", out.Ref, out.TenantID) })
			return nil
		}
	},
}}

// readSecret reads the value of the secret ref from the file, or standard input for "-",
// refusing one larger than a secret may be before anything is sent. A terminal on
// standard input is told first, on standard error, what to type and how to end it.
func readSecret(x *exec, path, ref string) ([]byte, error) {
	var r io.Reader
	switch path {
	case "-":
		if x.env.Stdin == nil {
			return nil, proto.Errorf(proto.InvalidInput, "no standard input to read the secret from").WithPath("--file")
		}
		if isTerminal(x.env.Stdin) {
			fmt.Fprintf(textWriter{x.env.Stderr}, "type the value of %s and end it with Ctrl-D on a line of its own (the newline before it is part of the value; Ctrl-D twice after the last character leaves it out)\n"+
				"what you type shows on the screen: --file FILE keeps the value off it\n", ref)
		}
		r = x.env.Stdin
	default:
		f, err := os.Open(path)
		if err != nil {
			return nil, proto.Errorf(proto.InvalidInput, "read %s: %v", path, err).WithPath("--file")
		}
		defer f.Close()
		r = f
	}
	value, err := readAll(x.ctx, io.LimitReader(r, api.MaxSecretValue+1))
	if err != nil {
		return nil, proto.Errorf(proto.InvalidInput, "read %s: %v", path, err).WithPath("--file")
	}
	if len(value) > api.MaxSecretValue {
		return nil, proto.Errorf(proto.InvalidInput, "%s holds more than %d bytes, the most a secret may be", path, api.MaxSecretValue).WithPath("--file")
	}
	return value, nil
}

// readAll reads r to its end, or until ctx ends (an interrupt): a read of a terminal
// blocks past a signal, and a Ctrl-C should end the command, not wait for a Ctrl-D. The
// read left behind ends with the process.
func readAll(ctx context.Context, r io.Reader) ([]byte, error) {
	type read struct {
		b   []byte
		err error
	}
	done := make(chan read, 1)
	go func() {
		b, err := io.ReadAll(r)
		done <- read{b, err}
	}()
	select {
	case d := <-done:
		return d.b, d.err
	case <-ctx.Done():
		return nil, fmt.Errorf("interrupted before the value's end, nothing sent (%w)", context.Cause(ctx))
	}
}

func secretTable(w *tabwriter.Writer, rows []api.Secret) {
	fmt.Fprintln(w, "REF\tTENANT\tCREATED\tUPDATED")
	for _, s := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Ref, s.TenantID, s.CreatedAt.Format(time.RFC3339), s.UpdatedAt.Format(time.RFC3339))
	}
}
