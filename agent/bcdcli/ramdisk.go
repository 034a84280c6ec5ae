package bcdcli

import (
	"context"
	"flag"
	"log/slog"

	"github.com/better-compute/better-compute/agent/ramdisk"
)

var ramdiskMode = Mode{
	Name:    "ramdisk",
	Usage:   "[--cmdline FILE] [--config-dir DIR] [--sys-root DIR] [--disk PATH] [--boot-command PATH]",
	Summary: "run the deploy ramdisk's agent: join with the token of the kernel command line, inspect, write the disk, kexec",
	Define: func(fs *flag.FlagSet) Runner {
		o := ramdisk.Options{}
		fs.StringVar(&o.Cmdline, "cmdline", "/proc/cmdline", "the kernel command line (bc.registry=, bc.pins=, bc.token=, bc.node=)")
		fs.StringVar(&o.ConfigDir, "config-dir", "/run/bcd", "where the join writes the key and certificates (a tmpfs)")
		fs.StringVar(&o.SysRoot, "sys-root", "/", "where /sys and /proc are read from for the inventory, diag.dcgm's GPUs and the boot id its hellos tell")
		fs.StringVar(&o.Disk, "disk", "", "the disk to write, and the only one disk.wipe wipes (default: write the largest disk, wipe every disk)")
		fs.StringVar(&o.BootCommand, "boot-command", "", "run this with the disk's path instead of kexec (machines that cannot kexec)")
		return func(ctx context.Context, env Env) error {
			o.Log = slog.New(slog.NewTextHandler(env.Stderr, nil))
			return ramdisk.Run(ctx, o)
		}
	},
}
