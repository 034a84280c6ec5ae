package cli

import (
	"io"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/cmdline"
	"github.com/better-compute/better-compute/registry/api"
)

var userDataCommands = []command{{
	path:    "userdata preview",
	usage:   "--profile ID --node NODE [--tenant T] [--profile-version N]",
	summary: "print the user data a node would boot with, its join token redacted; mints and stores nothing",
	long:    "print the user data the node would boot with, its join token redacted; mints and stores nothing",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		id := fs.String("profile", "", "profile whose userData to render (required)")
		version := new(int)
		fs.Var(cmdline.Decimal(version, 0), "profile-version", "profile version (default: the latest)")
		node := fs.String("node", "", "node id to render for (required)")
		return func(x *exec) error {
			req := api.PreviewUserDataRequest{ProfileKey: api.ProfileKey{TenantID: *tenant, ID: *id, ProfileVersion: *version}, NodeID: *node}
			var out api.UserDataPreview
			if err := x.call("userdata.preview", req, &out); err != nil {
				return err
			}
			if x.format == "json" {
				x.print(out, nil)
				return nil
			}
			// The document as it is: a table writer would realign its tabs.
			io.WriteString(x.env.Stdout, out.Document)
			return nil
		}
	},
}}
