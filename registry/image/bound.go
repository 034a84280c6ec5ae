package image

import (
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// SourceRefused reports whether a machine of pool p at site may not be made to fetch an
// image from source: the site's image sources do not allow its host and port (a site
// with none allows nothing), or the pool's policy.imageSources, when it has some, do not
// (byPool). It is NodeBound's proto.SourceBound, applied to the sources the registry
// hands out: the site's cache plan (PlanSiteCache), a ramdisk's deploy.image
// (registry/metal, which hands the ramdisk the bound too, for the requests and addresses
// of its fetch) and a BMC's virtual media (registry/site's media.insert).
func SourceRefused(site store.Site, p store.Pool, source string) (refused, byPool bool) {
	return NodeBound(site, p).Refused(source)
}

// NodeBound is where a machine of pool p at site may fetch images from: the site's image
// sources, narrowed by the pool's policy.imageSources when it has some.
func NodeBound(site store.Site, p store.Pool) proto.SourceBound {
	return proto.SourceBound{Site: site.ImageSources, Pool: p.Policy.ImageSources}
}

// NodeBounds are the site and pool whose image sources bound what node may be made to
// fetch (SourceRefused). A site the store does not know is one without image sources,
// which allows nothing; a pool it does not know narrows nothing.
func NodeBounds(tx *store.Tx, node store.Node) (store.Site, store.Pool, error) {
	st, err := tx.Site(node.Site)
	if proto.CodeOf(err) == proto.NotFound {
		st, err = store.Site{ID: node.Site}, nil
	}
	if err != nil {
		return store.Site{}, store.Pool{}, err
	}
	pool, err := tx.Pool(node.Tenant, node.Pool)
	if proto.CodeOf(err) == proto.NotFound {
		err = nil
	}
	return st, pool, err
}

// Fetch is a fetch a tenant's input would make a machine (or its BMC) do, as a refusal
// of it tells the tenant.
type Fetch struct {
	// Source is the URL fetched.
	Source string
	// What opens the message, and ends where the source's host is named: "image X is
	// not in the site's cache, and its source".
	What string
	// Path is the field the refusal points at.
	Path string
	// Else closes the message with the tenant's other way out: "; or ...".
	Else string
}

// RefuseFetch refuses f when SourceRefused does for a machine of pool p at site:
// FORBIDDEN, reason source-not-allowed, at f.Path, with a message that names the
// source's host and port and the site, and says what to do: the platform adds the host
// with `sites update`, or the tenant with `pools update` when its pool left it out. It
// never shows the site's image sources, which are the platform's; only the pool's, which
// are the tenant's own. Nil when the fetch is allowed.
func RefuseFetch(site store.Site, p store.Pool, f Fetch) error {
	refused, byPool := SourceRefused(site, p, f.Source)
	if !refused {
		return nil
	}
	host, port, _ := proto.SourceHost(f.Source)
	why := proto.Sprintf("is not among the hosts site %s lets its machines fetch from: the platform adds it with `better-compute sites update %s --image-sources ...` (the site's whole list, and %s:%s)", site.ID, site.ID, host, port)
	if byPool {
		why = proto.Sprintf("is not among pool %s's policy.imageSources %v: add it with `better-compute pools update %s --policy POLICY.json`", p.Name, p.Policy.ImageSources, p.Name)
	}
	return proto.Errorf(proto.Forbidden, "%s host %s:%s %s%s", f.What, host, port, why, f.Else).WithReason(proto.ReasonSourceNotAllowed).WithPath(f.Path)
}
