package cli

import (
	"cmp"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/cmdline"
	"github.com/better-compute/better-compute/registry/api"
)

var siteCommands = []command{{
	path:    "sites create",
	usage:   "NAME [--bmc-networks CIDR[,CIDR]] [--image-sources HOST[:PORT],*.DOMAIN[:PORT]]",
	summary: "create a site (root tenant credentials only)",
	long: "create a site; `--bmc-networks`: the networks its nodes' BMC addresses must be in (none: " +
		"no BMC on the network, docs/bmc.md); `--image-sources`: the hosts its caches, and its " +
		"machines being deployed, may fetch images from (`HOST[:PORT]`, `*.DOMAIN[:PORT]`; none by " +
		"default: the site pre-warms nothing and deploys only what its cache holds, so set them first)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		networks, sources := bmcNetworksFlag(fs), imageSourcesFlag(fs)
		return func(x *exec) error {
			req := api.CreateSiteRequest{Name: x.args[0]}
			if networks.refs != nil {
				req.BMCNetworks = *networks.refs
			}
			if sources.refs != nil {
				req.ImageSources = *sources.refs
			}
			var s api.Site
			if err := x.call("sites.create", req, &s); err != nil {
				return err
			}
			x.print(s, func(w *tabwriter.Writer) { siteTable(w, []api.Site{s}); siteSettings(w, s) })
			return nil
		}
	},
}, {
	path:    "sites update",
	usage:   "NAME [--bmc-networks CIDR[,CIDR]] [--image-sources HOST[:PORT],*.DOMAIN[:PORT]]",
	summary: "replace what a site admits (root tenant credentials only): its BMC networks, the hosts its caches and deploying machines may fetch images from (\"\" for none); a flag left out keeps its setting",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		networks, sources := bmcNetworksFlag(fs), imageSourcesFlag(fs)
		return func(x *exec) error {
			var s api.Site
			req := api.UpdateSiteRequest{SiteID: x.args[0], BMCNetworks: networks.refs, ImageSources: sources.refs}
			if err := x.call("sites.update", req, &s); err != nil {
				return err
			}
			x.print(s, func(w *tabwriter.Writer) { siteTable(w, []api.Site{s}); siteSettings(w, s) })
			return nil
		}
	},
}, {
	path:    "sites list",
	usage:   "[--cursor C]",
	summary: "list sites, each with whether its agent is connected, since when, when it was last seen, and its agent certificates' identity epoch and last revocation (`identityEpoch`, `agentRevoked`)",
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
	summary: "show the images the site's cache should hold (its pools' verified pre-warm images), the refs left out, with why, and the images the site failed to pull, with why when it said",
	long: "the images the site's cache should hold (its pools' verified pre-warm images); LEFT OUT (`excluded` in JSON): the refs left out, " +
		"with their reason and why; FAILED AT THE SITE (`failed`): the planned images the site's agent reports failed, with the reason its cache " +
		"gave: `source-not-allowed` with the REFUSED HOST its fetch was refused at (a redirect's, a token realm's, or the loopback or link-local " +
		"address a name led to; also an image whose digest the cache holds for another source while its own source was refused), `capacity`, or `-` (the site agent's log says why); a refused host listed with `sites update NAME --image-sources` " +
		"has the image pulled again at once (docs/site.md)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		return func(x *exec) error {
			var plan api.CachePlan
			if err := x.call("sites.cachePlan", api.SiteRequest{SiteID: x.args[0]}, &plan); err != nil {
				return err
			}
			x.print(plan, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "REF\tDIGEST\tSIZE\tFORMAT\tCOMPRESSION\tSOURCE")
				for _, c := range plan.CacheImages {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Ref, c.Digest, sizeText(c.SizeBytes), c.Format, c.Compression, c.Source)
				}
				if len(plan.Excluded) > 0 {
					fmt.Fprintln(w, "\nLEFT OUT\tTENANT\tPOOL\tREASON\tWHY")
					for _, e := range plan.Excluded {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.Ref, e.Tenant, e.Pool, e.Reason, e.Message)
					}
				}
				if len(plan.Failed) > 0 {
					fmt.Fprintln(w, "\nFAILED AT THE SITE\tDIGEST\tREASON\tREFUSED HOST")
					for _, f := range plan.Failed {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", f.Ref, f.Digest, cmp.Or(f.Reason, "-"), cmp.Or(f.RefusedHost, "-"))
					}
				}
			})
			return nil
		}
	},
}, {
	path:    "sites known-macs",
	usage:   "NAME [--cursor C] [--limit N]",
	summary: "show how many enrolled MACs the site's DHCP knows, the bound, and each enrolled MAC left out, with its tenant, node and why",
	long: "how many MACs the site knows (the machines enrolled in its pools, not retired, that its DHCP " +
		"serves as known clients), the most a site knows (16,384), and each enrolled MAC left out over it, " +
		"with its tenant, node and reason (`site-share`: the tenant with the most MACs at the site loses " +
		"those of its nodes enrolled last), by MAC, a page at a time (root tenant credentials only)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		cursor := fs.String("cursor", "", "resume after a previous page")
		limit := new(int)
		fs.Var(cmdline.Decimal(limit, 0), "limit", "at most this many left-out MACs a page (1 to 200; 200 when left out)")
		return func(x *exec) error {
			var out api.KnownMACs
			req := api.KnownMACsRequest{SiteID: x.args[0], ListRequest: api.ListRequest{Cursor: *cursor, Limit: *limit}}
			if err := x.call("sites.knownMacs", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "KNOWN\tMAX\tLEFT OUT\n%d\t%d\t%d\n", out.Known, out.Max, out.LeftOutCount)
				if len(out.LeftOut) > 0 {
					fmt.Fprintln(w, "\nMAC\tTENANT\tNODE\tREASON")
					for _, l := range out.LeftOut {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", l.MAC, l.Tenant, l.Node, l.Reason)
					}
				}
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}, {
	path:    "sites locations",
	usage:   "NAME [--cursor C] [--limit N]",
	summary: "show the images the site's caches hold, as its site agents report them (pulling, ready, failed, evicting), and why a failed one failed, 200 a page",
	long: "the images the site's caches hold, by state (`pulling`, `ready`, `failed`, `evicting`), as " +
		"its site agent reports them, with their last use (`-` for never) and, for a failed one, the reason its cache gave: " +
		"`source-not-allowed` with the REFUSED HOST its fetch was refused at (also an image whose digest is ready for another image's source " +
		"while its own source was refused), `capacity`, or `-` (the site agent's log says why), by digest, then source, then tenant and image id, a page at a time (docs/images.md)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		cursor := fs.String("cursor", "", "resume after a previous page")
		limit := new(int)
		fs.Var(cmdline.Decimal(limit, 0), "limit", "at most this many images a page (1 to 200; 200 when left out)")
		return func(x *exec) error {
			var out api.SiteLocations
			req := api.SiteLocationsRequest{SiteID: x.args[0], ListRequest: api.ListRequest{Cursor: *cursor, Limit: *limit}}
			if err := x.call("sites.locations", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "IMAGE\tDIGEST\tSTATE\tSIZE\tLAST USED\tREASON\tREFUSED HOST")
				for _, l := range out.Locations {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", l.ImageID, l.Digest, l.State, l.SizeBytes, orDash(l.LastUsed),
						cmp.Or(l.Reason, "-"), cmp.Or(l.RefusedHost, "-"))
				}
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}, {
	path:    "sites inventory",
	usage:   "NAME",
	summary: "show what the site's agent last reported: its HTTP base, cache, boot entries (tokens left out) and PXE discoveries",
	nargs:   1,
	long: "what the site's agent last reported: `site` (its HTTP base; `omitted`: the entries left out of each section cut to its budget), `images`, `bootEntries` (tokens left out), `discoveries`; " +
		"REFUSED (`refused` in JSON) gives when and how large the agent's latest report of a section was when the registry refused it as too large to store: the section shown is the copy stored before it, and `leftOut` counts the entries left out of that copy so that it could take the mark (a copy an earlier release stored at the bound keeps its first entries) (docs/site.md)",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		return func(x *exec) error {
			var out api.SiteInventory
			if err := x.call("sites.inventory", api.SiteRequest{SiteID: x.args[0]}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "SECTION\tUPDATED\tREFUSED\tDATA")
				for _, s := range out.Sections {
					refused := "-"
					if s.Refused != nil { // the copy shown is the one stored before
						refused = fmt.Sprintf("%s, %d bytes: too large", s.Refused.At.Format(time.RFC3339), s.Refused.Bytes)
						if s.Refused.LeftOut > 0 {
							refused += fmt.Sprintf("; the copy shown leaves out %d entries", s.Refused.LeftOut)
						}
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Section, s.UpdatedAt.Format(time.RFC3339), refused, s.Data)
				}
			})
			return nil
		}
	},
}, {
	path:    "sites revoke-identity",
	usage:   "NAME [--reason R]",
	summary: "revoke every certificate the site's agent holds now (root tenant credentials only); it joins again with a new site token",
	long: "revoke every certificate of the site's agent (`bcd site`) issued so far, and every copy of them: the site's identity epoch moves, " +
		"its session ends, and hello, renewals, relayed commands (with the BMC credentials they carry), answers and reports (discoveries, cache contents) are refused (`FORBIDDEN`, reason `revoked`); " +
		"the site's unused site tokens are deleted, and the reason is recorded on the site. The agent joins again with a token minted now " +
		"(`tokens create --kind site --site NAME`, then `bcd join --role site`) (docs/site.md)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		req := api.RevokeSiteCertificatesRequest{}
		fs.StringVar(&req.Reason, "reason", "", "why, recorded on the site (at most 256 bytes; default: an operator asked)")
		return func(x *exec) error {
			req.SiteID = x.args[0]
			var out api.CertificatesRevoked
			if err := x.call("sites.revokeCertificates", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				revokedLines(w, "site "+out.SiteID+"'s agent", out,
					"better-compute tokens create --kind site --site "+out.SiteID+", then bcd join --role site with it, and start bcd site again")
			})
			return nil
		}
	},
}}

func siteTable(w *tabwriter.Writer, sites []api.Site) {
	fmt.Fprintln(w, "SITE\tCREATED\tAGENT\tSINCE\tLAST SEEN\tREVOKED")
	for _, s := range sites {
		agent, since, seen := "never connected", "", ""
		if a := s.Agent; a != nil && !a.Since.IsZero() {
			agent, since, seen = "disconnected", a.Since.Format(time.RFC3339), a.LastSeen.Format(time.RFC3339)
			if a.Connected {
				agent = "connected"
			}
		}
		revoked := "-"
		if r := s.AgentRevoked; r != nil {
			revoked = fmt.Sprintf("%s (epoch %d)", r.At.Format(time.RFC3339), r.Epoch)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.CreatedAt.Format(time.RFC3339), agent, since, seen, revoked)
	}
}

// imageSourcesFlag is --image-sources, the site's imageSources.
func imageSourcesFlag(fs *flag.FlagSet) *listFlag {
	sources := &listFlag{}
	fs.Var(sources, "image-sources", "comma-separated host patterns the site's caches and deploying machines may fetch images from: HOST, HOST:PORT, *.DOMAIN or *.DOMAIN:PORT (port 443 when left out); none when empty")
	return sources
}

// bmcNetworksFlag is --bmc-networks, the site's bmcNetworks.
func bmcNetworksFlag(fs *flag.FlagSet) *listFlag {
	networks := &listFlag{}
	fs.Var(networks, "bmc-networks", "comma-separated CIDRs the BMC addresses of the site's nodes must be in; none (no BMC on the network) when empty")
	return networks
}

// siteSettings prints what a site admits under its table: its BMC networks and image
// sources.
func siteSettings(w *tabwriter.Writer, s api.Site) {
	or := func(list []string, none string) string {
		if len(list) == 0 {
			return none
		}
		return strings.Join(list, ", ")
	}
	fmt.Fprintf(w, "\nbmc networks:\t%s\n", or(s.BMCNetworks, "none: no BMC on the network"))
	fmt.Fprintf(w, "image sources:\t%s\n", or(s.ImageSources, "none: its caches pull no image"))
}
