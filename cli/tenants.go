package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

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
	usage:   "[--cursor C]",
	summary: "list tenants",
	long:    "list tenants, 200 a page",
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
	usage:   "[--tenant T] --actions A,B [--expires 720h|TIME] --out FILE [--force]",
	summary: "create a credential and write a CLI config for it (the secret is shown only there)",
	long:    "make a credential and its CLI config; `--expires` a duration from now or an RFC 3339 time (default: never, or with the caller's own expiry). `FILE` is written whole, mode 0600, and must be new unless `--force` (an existing file may be the only copy of another credential, say `admin.conf`), in a directory that exists and can be written: else `INVALID_INPUT` at `--out` before anything is made; a write that fails after that revokes the credential again. One past the tenant's bound (serve `--tenant-credentials`; revoked and expired ones count until they are pruned, 90 days on) is `INVALID_STATE` reason `quota` (docs/security.md#what-a-tenant-may-hold-in-the-store)",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant the credential belongs to (default: the caller's)")
		actions := fs.String("actions", "", "comma-separated actions, e.g. compute:profiles:read,compute:images:read (required)")
		expires := fs.String("expires", "", "when the credential stops working: a duration from now (720h) or an RFC 3339 time (default: never, or when the caller's own credential expires)")
		out := outFlags(fs, "the CLI config file to write, 0600; a new file unless --force (required)")
		return func(x *exec) error {
			if err := out.check(); err != nil {
				return err
			}
			expiresAt, err := parseExpiry(*expires, time.Now())
			if err != nil {
				return err
			}
			cfg, err := x.config()
			if err != nil {
				return err
			}
			c, err := x.clientOf(cfg)
			if err != nil {
				return err
			}
			var made api.CreatedCredential
			req := api.CreateCredentialRequest{TenantID: *tenant, Actions: csv(*actions), ExpiresAt: expiresAt}
			if err := c.Call(x.ctx, "credentials.create", req, &made); err != nil {
				return x.interrupted("credentials.create", err)
			}
			cfg.Credential = made.Secret
			if err := out.write(api.EncodeClientConfig(cfg)); err != nil {
				return revokeMinted(x, c, "credential", made.ID, "credentials.revoke", api.RevokeCredentialRequest{ID: made.ID}, err)
			}
			row := struct {
				api.Credential
				Config string `json:"config"`
			}{made.Credential, *out.path} // the secret is shown only in the file
			x.print(row, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "ID\tTENANT\tACTIONS\tEXPIRES\tCONFIG")
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", made.ID, made.TenantID, strings.Join(made.Actions, ","), orDash(made.ExpiresAt), *out.path)
			})
			return nil
		}
	},
}, {
	path:    "credentials list",
	usage:   "[--tenant T] [--cursor C]",
	summary: "list the tenant's credentials, expired and revoked ones too (never their secrets)",
	long:    "the tenant's credentials, expired and revoked too (kept 90 days after): id, tenant, actions, created, expires, revoked (never secrets), 200 a page",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant whose credentials to list (default: the caller's)")
		cursor := fs.String("cursor", "", "resume after a previous page")
		return func(x *exec) error {
			var out api.CredentialList
			if err := x.call("credentials.list", api.ListCredentialsRequest{TenantID: *tenant, ListRequest: api.ListRequest{Cursor: *cursor}}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				credentialTable(w, out.Credentials)
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}, {
	path:    "credentials revoke",
	usage:   "ID",
	summary: "revoke a credential: it is refused from now on",
	nargs:   1,
	long:    "revoke a credential of the caller's tenant (root: of any tenant); refused at once from then on",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		return func(x *exec) error {
			var out api.Credential
			if err := x.call("credentials.revoke", api.RevokeCredentialRequest{ID: x.args[0]}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { credentialTable(w, []api.Credential{out}) })
			return nil
		}
	},
}, {
	path:     "credentials rotate-admin",
	hostOnly: true,
	usage:    "--data-dir DIR",
	summary:  "replace the admin credential: a new one in DIR/admin.conf, the old ones revoked; host only",
	long: "replace the admin credential (the root tenant's `*`, which nobody grants) through the admin socket of the registry running on this host: " +
		"it makes a new one, writes it to `DIR/admin.conf` (whole, 0600), then revokes every admin credential that worked before, the old `admin.conf`'s and any other. " +
		"A failure says what it left: the old file and credential working, or the new file working and the old credentials not yet revoked (run it again). " +
		"With replicas, copy the new `admin.conf` to the other replicas' data directories (docs/operations.md)",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		dataDir := fs.String("data-dir", "", "the data directory of the registry running on this host (required)")
		return func(x *exec) error {
			var out api.RotatedAdmin
			if err := hostCall(x, *dataDir, "credentials.rotateAdmin", struct{}{}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "ADMIN\tCREATED\tCONFIG\tREVOKED")
				revoked := make([]string, len(out.Revoked))
				for i, c := range out.Revoked {
					revoked[i] = c.ID
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", out.Admin.ID, out.Admin.CreatedAt.Format(time.RFC3339), out.Config, strings.Join(revoked, ","))
			})
			return nil
		}
	},
}}

// parseExpiry reads --expires: empty for none, a positive duration counted from now, or
// an RFC 3339 time.
func parseExpiry(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, proto.Errorf(proto.InvalidInput, "--expires %.40q: give a positive duration", s).WithPath("--expires")
		}
		return now.Add(d).Truncate(time.Second), nil
	}
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, proto.Errorf(proto.InvalidInput, "--expires %.40q: give a duration from now such as 720h, or an RFC 3339 time such as 2027-01-31T00:00:00Z", s).WithPath("--expires")
	}
	return at, nil
}

func credentialTable(w *tabwriter.Writer, rows []api.Credential) {
	fmt.Fprintln(w, "ID\tTENANT\tACTIONS\tCREATED\tEXPIRES\tREVOKED")
	for _, c := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.TenantID, strings.Join(c.Actions, ","), c.CreatedAt.Format(time.RFC3339), orDash(c.ExpiresAt), orDash(c.RevokedAt))
	}
}

// orDash is t in RFC 3339, or "-" for the zero time.
func orDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}

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
