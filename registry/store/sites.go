package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Site is a place with machines and one or more site agents (a rack, a room). Sites
// are the platform's: only the root tenant makes them; tenants' pools name them.
type Site struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`

	// BMCNetworks are the networks (CIDRs) the BMC addresses of the site's nodes must be
	// in; none admits no BMC on the network (sitebmc.go).
	BMCNetworks []string `json:"bmcNetworks,omitempty"`

	// ImageSources are the host patterns the site's caches may pull images from
	// (proto.CheckImageSources); none allows no source.
	ImageSources []string `json:"imageSources,omitempty"`

	// IdentityEpoch counts the operator's revocations of the site agent's certificates
	// (sites revoke-identity). Every certificate of the site agent names the epoch it
	// was issued in (proto.IdentityEpoch; one issued before epochs names none, epoch 0);
	// one of an earlier epoch is refused (CheckAgent).
	IdentityEpoch int64 `json:"identityEpoch,omitempty"`
	// AgentRevoked is the last of those revocations; nil when there was none.
	AgentRevoked *Revocation `json:"agentRevoked,omitempty"`
}

const bucketSites = "sites"

// checkName refuses a site or pool name outside proto's shape of names.
func checkName(kind, name, path string) error {
	if !proto.IsObjectName(name) {
		return proto.Errorf(proto.InvalidInput, "%s name %q: use 1 to 63 lower-case letters, digits and hyphens, starting with a letter", kind, name).WithPath(path)
	}
	return nil
}

// CreateSite stores a new site; an existing one is CONFLICT.
func (t *Tx) CreateSite(name string) (Site, error) {
	if err := checkName("site", name, "name"); err != nil {
		return Site{}, err
	}
	if t.getRaw(bucketSites, []byte(name)) != nil {
		return Site{}, proto.Errorf(proto.Conflict, "site %q exists already: `sites update %s` changes what it admits, or name another site", name, name).WithPath("name")
	}
	s := Site{ID: name, CreatedAt: t.now}
	return s, t.put(bucketSites, []byte(name), s)
}

// SetSiteImageSources replaces the host patterns site's caches may pull images from. A
// bad pattern is INVALID_INPUT at imageSources[i]; a site that does not exist NOT_FOUND.
func (t *Tx) SetSiteImageSources(id string, patterns []string) (Site, error) {
	if err := proto.CheckImageSources(patterns, "imageSources"); err != nil {
		return Site{}, err
	}
	s, err := t.Site(id)
	if err != nil {
		return s, err
	}
	s.ImageSources = patterns
	return s, t.put(bucketSites, []byte(id), s)
}

// Site returns one site, NOT_FOUND when it does not exist.
func (t *Tx) Site(id string) (Site, error) {
	var s Site
	ok, err := t.get(bucketSites, []byte(id), &s)
	if err == nil && !ok {
		err = notFound("site", id)
	}
	return s, err
}

// Sites lists the sites, one page at a time.
func (t *Tx) Sites(p Page) ([]Site, string, error) {
	var out []Site
	next, err := t.scan(bucketSites, nil, p, func(k, v []byte) (func(), error) {
		var s Site
		if err := decode(bucketSites, k, v, &s); err != nil {
			return nil, err
		}
		return func() { out = append(out, s) }, nil
	})
	return out, next, err
}
