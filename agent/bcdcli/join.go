package bcdcli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/better-compute/better-compute/agent/join"
	"github.com/better-compute/better-compute/cmdline"
	"github.com/better-compute/better-compute/proto"
)

var joinMode = Mode{
	Name:    "join",
	Usage:   "--server URL --token-file PATH --node-id ID --serving-ca-pin P --join-signing-pin P --join-encryption-pin P [--role node|ramdisk|site] [--config-dir DIR] [--format table|json]",
	Summary: "join the registry with a single-use token; writes the key, certificates and config.toml",
	Define: func(fs *flag.FlagSet) Runner {
		opts := join.Flags(fs)
		format := fs.String("format", "table", "`FORMAT` of the result: table, or json (the result, or the error, as one JSON object on standard output)")
		return func(ctx context.Context, env Env) error {
			if *format != "table" && *format != "json" {
				return cmdline.Usagef("--format", "--format %q: give table or json", *format)
			}
			if _, err := opts.Check(); err != nil {
				return cmdline.UsageOf(err) // a flag's value bcd cannot join with: the command line is wrong
			}
			opts.Log = slog.New(slog.NewTextHandler(env.Stderr, nil))
			res, err := join.Join(ctx, *opts)
			if err != nil {
				return err
			}
			var warning string
			if res.TokenFileErr != nil {
				warning = fmt.Sprintf("the token is spent, but removing its file failed: %v", res.TokenFileErr)
				fmt.Fprintf(env.Stderr, "bcd join: warning: %s\n", warning)
			}
			if *format == "json" {
				return proto.NewEncoder(env.Stdout).Encode(Joined{NodeID: res.Config.NodeID, Role: string(res.Config.Role), ConfigDir: res.ConfigDir, Warning: warning})
			}
			fmt.Fprintf(env.Stdout, "joined as %s (role %s); configuration in %s\n", res.Config.NodeID, res.Config.Role, res.ConfigDir)
			return nil
		}
	},
}

// Joined is what `bcd join --format json` prints when it joined: the node, its role, the
// directory it wrote, and a warning when the token's file could not be removed.
type Joined struct {
	NodeID    string `json:"nodeId"`
	Role      string `json:"role"`
	ConfigDir string `json:"configDir"`
	Warning   string `json:"warning,omitempty"`
}
