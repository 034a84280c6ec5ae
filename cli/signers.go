package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

// Signer commands act through the admin socket of a running registry on this host:
// there is no network API method that changes an allowlist.
var signerCommands = []command{{
	path:     "signers add",
	hostOnly: true,
	usage:    "--data-dir DIR --tenant T --id ID --public-key FILE.pem",
	summary:  "put an Ed25519 or ECDSA P-256 key on a tenant's image-signer allowlist (root: the platform's); host only",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		dataDir := fs.String("data-dir", "", "the registry's data directory (required)")
		tenant := fs.String("tenant", "", "tenant whose allowlist changes; root for a platform signer (required)")
		id := fs.String("id", "", "signer id (required)")
		keyFile := fs.String("public-key", "", "SPKI PEM `FILE`, as openssl pkey -pubout writes it (required)")
		return func(x *exec) error {
			pem, err := readFile(*keyFile)
			if err != nil {
				return err
			}
			var s api.ImageSigner
			if err := hostCall(x, *dataDir, "signers.add", api.AddSignerRequest{TenantID: *tenant, ID: *id, PublicKey: string(pem)}, &s); err != nil {
				return err
			}
			x.print(s, func(w *tabwriter.Writer) { signerTable(w, []api.ImageSigner{s}) })
			return nil
		}
	},
}, {
	path:     "signers revoke",
	hostOnly: true,
	usage:    "--data-dir DIR --tenant T --id ID",
	summary:  "revoke a signer: its images keep verified but no longer deploy; host only",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		dataDir := fs.String("data-dir", "", "the registry's data directory (required)")
		tenant := fs.String("tenant", "", "tenant whose allowlist changes (required)")
		id := fs.String("id", "", "signer id (required)")
		return func(x *exec) error {
			var s api.ImageSigner
			if err := hostCall(x, *dataDir, "signers.revoke", api.SignerRequest{TenantID: *tenant, ID: *id}, &s); err != nil {
				return err
			}
			x.print(s, func(w *tabwriter.Writer) { signerTable(w, []api.ImageSigner{s}) })
			return nil
		}
	},
}, {
	path:     "signers list",
	hostOnly: true,
	usage:    "--data-dir DIR [--tenant T] [--cursor C]",
	summary:  "list image signers, revoked ones included; host only",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		dataDir := fs.String("data-dir", "", "the registry's data directory (required)")
		tenant := fs.String("tenant", "", "only this tenant's signers (default: every tenant's)")
		cursor := fs.String("cursor", "", "resume after a previous page")
		return func(x *exec) error {
			var out api.SignerList
			if err := hostCall(x, *dataDir, "signers.list", api.ListSignersRequest{TenantID: *tenant, ListRequest: api.ListRequest{Cursor: *cursor}}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				signerTable(w, out.Signers)
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}}

// hostCall calls a host-only method through the admin socket in dataDir.
func hostCall(x *exec, dataDir, method string, req, resp any) error {
	if dataDir == "" {
		return proto.Errorf(proto.InvalidInput, "give --data-dir DIR of the registry running on this host: %s is served only through its admin socket", method).WithPath("--data-dir")
	}
	return x.interrupted(method, api.NewHostClient(dataDir).Call(x.ctx, method, req, resp))
}

func signerTable(w *tabwriter.Writer, signers []api.ImageSigner) {
	fmt.Fprintln(w, "TENANT\tID\tALGORITHM\tFINGERPRINT\tADDED\tREVOKED")
	for _, s := range signers {
		revoked := "-"
		if !s.RevokedAt.IsZero() {
			revoked = s.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Tenant, s.ID, s.Algorithm, s.Fingerprint, s.AddedAt.Format(time.RFC3339), revoked)
	}
}
