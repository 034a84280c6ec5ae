package cli

import (
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
)

var poolCommands = []command{{
	path:    "pools create",
	usage:   "NAME --site S [--prewarm REF,REF] [--tenant T]",
	summary: "create a pool of the tenant at a site, with the images its site's cache pre-warms",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant the pool belongs to (default: the caller's)")
		site := fs.String("site", "", "site of the pool (required)")
		prewarm := fs.String("prewarm", "", "comma-separated name@version refs for policy.prewarmImages")
		return func(x *exec) error {
			req := api.CreatePoolRequest{TenantID: *tenant, Name: x.args[0], SiteID: *site, Policy: store.PoolPolicy{PrewarmImages: csv(*prewarm)}}
			var p store.Pool
			if err := x.call("pools.create", req, &p); err != nil {
				return err
			}
			x.print(p, func(w *tabwriter.Writer) { poolTable(w, []store.Pool{p}) })
			return nil
		}
	},
}, {
	path:    "pools get",
	usage:   "NAME [--tenant T]",
	summary: "show one pool",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant the pool belongs to (default: the caller's)")
		return func(x *exec) error {
			var p store.Pool
			if err := x.call("pools.get", api.PoolRequest{TenantID: *tenant, Name: x.args[0]}, &p); err != nil {
				return err
			}
			x.print(p, func(w *tabwriter.Writer) { poolTable(w, []store.Pool{p}) })
			return nil
		}
	},
}, {
	path:    "pools update",
	usage:   "NAME --prewarm REF,REF [--tenant T]",
	summary: "replace a pool's pre-warm images (--prewarm '' clears them)",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant the pool belongs to (default: the caller's)")
		var prewarm *string
		fs.Func("prewarm", "comma-separated name@version refs for policy.prewarmImages (required)", func(s string) error { prewarm = &s; return nil })
		return func(x *exec) error {
			if prewarm == nil {
				return proto.Errorf(proto.InvalidInput, "pools update needs --prewarm REF,REF (or '' to clear the list)").WithPath("policy.prewarmImages")
			}
			req := api.UpdatePoolRequest{TenantID: *tenant, Name: x.args[0], Policy: store.PoolPolicy{PrewarmImages: csv(*prewarm)}}
			var p store.Pool
			if err := x.call("pools.update", req, &p); err != nil {
				return err
			}
			x.print(p, func(w *tabwriter.Writer) { poolTable(w, []store.Pool{p}) })
			return nil
		}
	},
}, {
	path:    "pools list",
	usage:   "[--tenant T] [--cursor C]",
	summary: "list the tenant's pools",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := fs.String("tenant", "", "tenant whose pools to list (default: the caller's)")
		cursor := fs.String("cursor", "", "resume after a previous page")
		return func(x *exec) error {
			var out api.PoolList
			if err := x.call("pools.list", api.ListPoolsRequest{TenantID: *tenant, ListRequest: api.ListRequest{Cursor: *cursor}}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				poolTable(w, out.Pools)
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}}

func poolTable(w *tabwriter.Writer, pools []store.Pool) {
	fmt.Fprintln(w, "TENANT\tPOOL\tSITE\tPREWARM")
	for _, p := range pools {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", p.Tenant, p.Name, p.Site, strings.Join(p.Policy.PrewarmImages, ","))
	}
}
