package bcdcli

import (
	"context"
	"flag"
	"log/slog"

	"github.com/better-compute/better-compute/agent/node"
	"github.com/better-compute/better-compute/proto/bcdargv"
)

var nodeMode = Mode{
	Name:    "node",
	Usage:   "[--config-dir DIR] [--root DIR]",
	Summary: "run the node agent of an installed host: keep its host configuration converged to its NodeSpec, report its hardware, run diag.dcgm",
	Define: func(fs *flag.FlagSet) Runner {
		o := node.Options{}
		fs.StringVar(&o.ConfigDir, "config-dir", bcdargv.ConfigDir, "the `DIR` bcd join wrote")
		fs.StringVar(&o.Root, "root", "/", "where the host's / is (a chroot): its files, and the /sys and /proc the inventory and diag.dcgm read, and the boot id (proc/sys/kernel/random/boot_id) its hellos tell")
		return func(ctx context.Context, env Env) error {
			o.Log = slog.New(slog.NewTextHandler(env.Stderr, nil))
			return node.Run(ctx, o)
		}
	},
}
