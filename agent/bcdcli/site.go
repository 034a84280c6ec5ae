package bcdcli

import (
	"context"
	"flag"
	"log/slog"

	"github.com/better-compute/better-compute/agent/site"
)

var siteMode = Mode{
	Name:    "site",
	Usage:   "--config FILE",
	Summary: "run the site agent: boot server, image cache and BMC steps of a rack",
	Define: func(fs *flag.FlagSet) Runner {
		path := fs.String("config", "/etc/bcd/site.json", "the site config (JSON, version 1; see docs/site.md)")
		return func(ctx context.Context, env Env) error {
			cfg, err := site.LoadConfig(*path)
			if err != nil {
				return err
			}
			return site.Run(ctx, cfg, slog.New(slog.NewTextHandler(env.Stderr, nil)))
		}
	},
}
