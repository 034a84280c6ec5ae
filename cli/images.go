package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/cmdline"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

var imageCommands = []command{{
	path:    "images register",
	usage:   "[--tenant T] --ref NAME@VERSION --source URL --disk-format F [--compression C] --sha256 D [--size N] [--kind K] [--signer ID --signature B64]",
	summary: "register an image by digest; signed with --signer and --signature (together), else private and unverified",
	long: "register an image by digest; signed with --signer and --signature (together), else private and " +
		"unverified. An image is kept for ever: one past the tenant's bound (serve `--tenant-images`) is " +
		"`INVALID_STATE` reason `quota` (docs/security.md#what-a-tenant-may-hold-in-the-store)",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant the image belongs to (default: the caller's)")
		var req api.RegisterImageRequest
		fs.StringVar(&req.Ref, "ref", "", "name@version, unique in the tenant (required)")
		fs.StringVar(&req.Source, "source", "", "https:// or oci:// URL the artifact is pulled from (required)")
		fs.Var(cmdline.OneOf(&req.Format, proto.ImageFormats), "disk-format", "raw, qcow2 or iso (required)")
		fs.Var(cmdline.OneOf(&req.Compression, proto.Compressions), "compression", "none (default), zstd or gzip")
		fs.StringVar(&req.SHA256, "sha256", "", "64 hex digits of the artifact as stored (required)")
		fs.Var(cmdline.OneOf(&req.Kind, proto.ImageKinds), "kind", "os (default) or ramdisk")
		fs.StringVar(&req.SignerID, "signer", "", "id of the signer on the tenant's or the platform's allowlist")
		fs.StringVar(&req.Signature, "signature", "", "base64 signature over the image's signing input")
		var size sizeFlag
		fs.Var(&size, "size", "artifact size in bytes, 1 to 2^53-1 in decimal digits (default: unknown, which the site caches learn when they pull it)")
		return func(x *exec) error {
			req.SizeBytes = size.n
			req.TenantID, req.Signature = *tenant, api.LowSSignature(req.Signature)
			var img api.Image
			if err := x.call("images.register", req, &img); err != nil {
				return err
			}
			x.print(img, func(w *tabwriter.Writer) { imageTable(w, []api.Image{img}) })
			return nil
		}
	},
}, {
	path:    "images list",
	usage:   "[--tenant T] [--kind K] [--cursor C]",
	summary: "list the tenant's own and the public images, 200 a page",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant whose view to list (default: the caller's)")
		kind := new(proto.ImageKind)
		fs.Var(cmdline.OneOf(kind, proto.ImageKinds), "kind", "only this kind: os or ramdisk")
		cursor := fs.String("cursor", "", "resume after a previous page")
		return func(x *exec) error {
			var out api.ImageList
			req := api.ListImagesRequest{TenantID: *tenant, Kind: *kind, ListRequest: api.ListRequest{Cursor: *cursor}}
			if err := x.call("images.list", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				imageTable(w, out.Images)
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}, {
	path:    "images get",
	usage:   "ID|REF [--tenant T]",
	summary: "show one image, by id or by the ref a profile names it with (name@version, or TENANT/name@version)",
	long: "show one image, by id or by ref as a deploy resolves it (`os@1`, or `acme/os@1` for " +
		"another tenant's public image)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant whose view to read (default: the caller's)")
		return func(x *exec) error {
			req := api.GetImageRequest{TenantID: *tenant, ID: x.args[0]}
			if strings.Contains(req.ID, "@") {
				req.ID, req.Ref = "", req.ID
			}
			var img api.Image
			if err := x.call("images.get", req, &img); err != nil {
				return err
			}
			x.print(img, func(w *tabwriter.Writer) {
				imageTable(w, []api.Image{img})
				fmt.Fprintf(w, "\nsha256:\t%s\nsize:\t%s\nsource:\t%s\nsigner:\t%s\n", img.SHA256, sizeText(img.SizeBytes), img.Source, signerOf(img))
			})
			return nil
		}
	},
}, {
	path:    "images promote",
	usage:   "ID [--tenant T]",
	summary: "make a verified image public to every tenant",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant that owns the image (default: the caller's)")
		return func(x *exec) error {
			var img api.Image
			if err := x.call("images.promote", api.ImageRequest{TenantID: *tenant, ID: x.args[0]}, &img); err != nil {
				return err
			}
			x.print(img, func(w *tabwriter.Writer) { imageTable(w, []api.Image{img}) })
			return nil
		}
	},
}}

func imageTable(w *tabwriter.Writer, imgs []api.Image) {
	fmt.Fprintln(w, "ID\tTENANT\tREF\tKIND\tFORMAT\tCOMPRESSION\tVERIFIED\tPUBLIC")
	for _, i := range imgs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%v\t%v\n", i.ID, i.Tenant, i.Ref, i.Kind, i.Format, i.Compression, i.Verified, i.Public)
	}
}

// sizeText is an artifact's size in bytes, or "unknown" (0: registered without one).
func sizeText(n int64) string {
	if n == 0 {
		return "unknown"
	}
	return strconv.FormatInt(n, 10)
}

func signerOf(img api.Image) string {
	if img.SignerID == "" {
		return "none (unsigned)"
	}
	return img.SignerID + " of " + img.SignerTenant
}
