package cli

import (
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

var tenantCommands = []command{{
	path:    "tenants create",
	usage:   "NAME",
	summary: "create a tenant (root tenant credentials only)",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		return func(x *exec) error {
			var tn tenantRow
			if err := x.call("tenants.create", api.CreateTenantRequest{Name: x.args[0]}, &tn); err != nil {
				return err
			}
			x.print(tn, func(w *tabwriter.Writer) { tenantTable(w, []tenantRow{tn}) })
			return nil
		}
	},
}, {
	path:    "tenants list",
	summary: "list tenants",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		cursor := fs.String("cursor", "", "resume after a previous page")
		return func(x *exec) error {
			var out struct {
				Tenants    []tenantRow `json:"tenants"`
				NextCursor string      `json:"nextCursor,omitempty"`
			}
			if err := x.call("tenants.list", api.ListRequest{Cursor: *cursor}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				tenantTable(w, out.Tenants)
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}, {
	path:    "credentials create",
	usage:   "--tenant T --actions A,B --out FILE",
	summary: "create a credential and write a CLI config for it (the secret is shown only there)",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant the credential belongs to (default: the caller's)")
		actions := fs.String("actions", "", "comma-separated actions, e.g. compute:profiles:read,compute:images:read")
		outPath := fs.String("out", "", "CLI config file to write, 0600 (required)")
		return func(x *exec) error {
			if *outPath == "" {
				return proto.Errorf(proto.InvalidInput, "credentials create needs --out FILE: the secret is written only there").WithPath("--out")
			}
			c, err := x.client()
			if err != nil {
				return err
			}
			var made api.CreatedCredential
			if err := c.Call(x.ctx, "credentials.create", api.CreateCredentialRequest{TenantID: *tenant, Actions: csv(*actions)}, &made); err != nil {
				return err
			}
			cfg, err := api.LoadClientConfig(x.configFile())
			if err != nil {
				return err
			}
			cfg.Credential = made.Credential
			if err := api.WriteClientConfig(*outPath, cfg); err != nil {
				return proto.Errorf(proto.Internal, "credential %s made, but writing %s failed: %v; make another", made.ID, *outPath, err)
			}
			made.Credential = "" // shown only in the file
			row := struct {
				api.CreatedCredential
				Config string `json:"config"`
			}{made, *outPath}
			x.print(row, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "ID\tTENANT\tACTIONS\tCONFIG")
				fmt.Fprintf(w, "%s\t%s\t%v\t%s\n", made.ID, made.TenantID, made.Actions, *outPath)
			})
			return nil
		}
	},
}}

type tenantRow struct {
	ID        string `json:"id"`
	CreatedAt string `json:"createdAt"`
}

func tenantTable(w *tabwriter.Writer, rows []tenantRow) {
	fmt.Fprintln(w, "TENANT\tCREATED")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\n", r.ID, r.CreatedAt)
	}
}

// nextPage tells a person how to get the next page of a list.
func nextPage(w *tabwriter.Writer, cursor string) {
	if cursor != "" {
		fmt.Fprintf(w, "\nmore: add --cursor %s\n", cursor)
	}
}
