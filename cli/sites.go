package cli

import (
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/store"
)

var siteCommands = []command{{
	path:    "sites create",
	usage:   "NAME [--image-sources HOST[:PORT],*.DOMAIN[:PORT]]",
	summary: "create a site (root tenant credentials only)",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		sources := imageSourcesFlag(fs)
		return func(x *exec) error {
			req := api.CreateSiteRequest{Name: x.args[0]}
			if sources.refs != nil {
				req.ImageSources = *sources.refs
			}
			var s store.Site
			if err := x.call("sites.create", req, &s); err != nil {
				return err
			}
			x.print(s, func(w *tabwriter.Writer) { siteTable(w, []store.Site{s}); siteSources(w, s) })
			return nil
		}
	},
}, {
	path:    "sites update",
	usage:   "NAME --image-sources HOST[:PORT],*.DOMAIN[:PORT]",
	summary: "replace a site's settings: the hosts its caches may pull images from (empty: none)",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		sources := imageSourcesFlag(fs)
		return func(x *exec) error {
			var s store.Site
			if err := x.call("sites.update", api.UpdateSiteRequest{SiteID: x.args[0], ImageSources: sources.refs}, &s); err != nil {
				return err
			}
			x.print(s, func(w *tabwriter.Writer) { siteTable(w, []store.Site{s}); siteSources(w, s) })
			return nil
		}
	},
}, {
	path:    "sites list",
	usage:   "[--cursor C]",
	summary: "list sites",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		cursor := fs.String("cursor", "", "resume after a previous page")
		return func(x *exec) error {
			var out api.SiteList
			if err := x.call("sites.list", api.ListRequest{Cursor: *cursor}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				siteTable(w, out.Sites)
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}, {
	path:    "sites cache-plan",
	usage:   "NAME",
	summary: "show the images the site's cache should hold (its pools' verified pre-warm images) and the refs left out, with why",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		return func(x *exec) error {
			var plan image.CachePlan
			if err := x.call("sites.cachePlan", api.SiteRequest{SiteID: x.args[0]}, &plan); err != nil {
				return err
			}
			x.print(plan, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "REF\tDIGEST\tSIZE\tFORMAT\tCOMPRESSION\tSOURCE")
				for _, c := range plan.CacheImages {
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", c.Ref, c.Digest, c.SizeBytes, c.Format, c.Compression, c.Source)
				}
				if len(plan.Excluded) > 0 {
					fmt.Fprintln(w, "\nLEFT OUT\tTENANT\tPOOL\tREASON\tWHY")
					for _, e := range plan.Excluded {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.Ref, e.Tenant, e.Pool, e.Reason, e.Message)
					}
				}
			})
			return nil
		}
	},
}, {
	path:    "sites locations",
	usage:   "NAME",
	summary: "show the images the site's caches hold, as its site agents report them (pulling, ready, failed, evicting)",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		return func(x *exec) error {
			var out api.SiteLocations
			if err := x.call("sites.locations", api.SiteRequest{SiteID: x.args[0]}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "IMAGE\tDIGEST\tSTATE\tSIZE\tLAST USED")
				for _, l := range out.Locations {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", l.ImageID, l.Digest, l.State, l.SizeBytes, l.LastUsed.Format(time.RFC3339))
				}
			})
			return nil
		}
	},
}, {
	path:    "sites inventory",
	usage:   "NAME",
	summary: "show what the site's agent last reported: its HTTP base, cache, boot entries (tokens left out) and PXE discoveries",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		return func(x *exec) error {
			var out api.SiteInventory
			if err := x.call("sites.inventory", api.SiteRequest{SiteID: x.args[0]}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "SECTION\tUPDATED\tDATA")
				for _, s := range out.Sections {
					fmt.Fprintf(w, "%s\t%s\t%s\n", s.Section, s.UpdatedAt.Format(time.RFC3339), s.Data)
				}
			})
			return nil
		}
	},
}}

func siteTable(w *tabwriter.Writer, sites []store.Site) {
	fmt.Fprintln(w, "SITE\tCREATED")
	for _, s := range sites {
		fmt.Fprintf(w, "%s\t%s\n", s.ID, s.CreatedAt.Format(time.RFC3339))
	}
}

// imageSourcesFlag is --image-sources, the site's imageSources.
func imageSourcesFlag(fs *flag.FlagSet) *listFlag {
	sources := &listFlag{}
	fs.Var(sources, "image-sources", "comma-separated host patterns the site's caches may pull images from: HOST, HOST:PORT, *.DOMAIN or *.DOMAIN:PORT (port 443 when left out); none when empty")
	return sources
}

// siteSources prints a site's image sources under its table.
func siteSources(w *tabwriter.Writer, s store.Site) {
	list := strings.Join(s.ImageSources, ", ")
	if list == "" {
		list = "none: its caches pull no image"
	}
	fmt.Fprintf(w, "\nimage sources:\t%s\n", list)
}
