package bcdcli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/better-compute/better-compute/agent/join"
	"github.com/better-compute/better-compute/cmdline"
)

var joinMode = Mode{
	Name:    "join",
	Usage:   "--server URL --token-file PATH --node-id ID --serving-ca-pin P --join-signing-pin P --join-encryption-pin P [--role node|ramdisk|site] [--config-dir DIR]",
	Summary: "join the registry with a single-use token; writes the key, certificates and config.toml",
	Define: func(fs *flag.FlagSet) Runner {
		opts := join.Flags(fs)
		return func(ctx context.Context, env Env) error {
			if _, err := opts.Check(); err != nil {
				return cmdline.UsageOf(err) // a flag's value bcd cannot join with: the command line is wrong
			}
			opts.Log = slog.New(slog.NewTextHandler(env.Stderr, nil))
			res, err := join.Join(ctx, *opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "joined as %s (role %s); configuration in %s\n", res.Config.NodeID, res.Config.Role, res.ConfigDir)
			if res.TokenFileErr != nil {
				fmt.Fprintf(env.Stderr, "bcd join: warning: the token is spent, but removing its file failed: %v\n", res.TokenFileErr)
			}
			return nil
		}
	},
}
