package store

import (
	"bytes"
	"slices"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// SiteLocation says that a site's cache holds (or is pulling, or evicting, or failed)
// an artifact for one source of it. It is stored once for the site, digest and source,
// whatever number of catalog images, of any tenants, name that digest and source: each
// of them is located by it (ImageLocation). Rows are derived from the site agents' cache
// reports alone: the site's cache decides what to evict, never the registry
// (docs/images.md).
type SiteLocation struct {
	Site      string                `json:"siteId"`
	Digest    string                `json:"digest"`
	Source    string                `json:"source"`
	State     proto.ImageCacheState `json:"state"`
	SizeBytes int64                 `json:"sizeBytes"`
	// LastUsed is the latest use the site's agents reported.
	LastUsed time.Time `json:"lastUsed,omitzero"`
	// Reason and RefusedHost are why the artifact failed at the site for the source, as
	// the agent whose entry gave the state reported it (proto.ImageCacheEntry's); empty
	// when it gave none.
	Reason      string    `json:"reason,omitempty"`
	RefusedHost string    `json:"refusedHost,omitempty"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

// ImageLocation is a catalog image's location at a site: the SiteLocation of its
// digest and source there, read for the image. (Before format 6 it was stored, one for
// each image, its JSON without the source.)
type ImageLocation struct {
	SiteLocation
	ImageID string `json:"imageId"`
}

// bucketSiteLocations holds the SiteLocations (format 6 on), keyed siteLocationKey.
const bucketSiteLocations = "site_locations"

// siteLocationKey is a location's key in bucketSiteLocations: site, digest, source.
func siteLocationKey(site, digest, source string) []byte {
	return []byte(site + "\x00" + digest + "\x00" + source)
}

// of is loc as the location of img.
func (loc SiteLocation) of(img Image) ImageLocation {
	return ImageLocation{SiteLocation: loc, ImageID: img.ID}
}

// PutSiteLocation writes the location of an artifact for a source at an existing site,
// which locates every image of that digest and source there.
func (t *Tx) PutSiteLocation(loc SiteLocation) (SiteLocation, error) {
	if _, err := t.Site(loc.Site); err != nil {
		return loc, err
	}
	switch {
	case !proto.IsDigest(loc.Digest):
		return loc, proto.Errorf(proto.InvalidInput, "digest must be 64 lower-case hex digits").WithPath("digest")
	case loc.Source == "":
		return loc, proto.Errorf(proto.InvalidInput, "a location names the source its site holds the artifact for").WithPath("source")
	case !slices.Contains(proto.ImageCacheStates, loc.State):
		return loc, proto.Errorf(proto.InvalidInput, "location state %q: use one of %v", loc.State, proto.ImageCacheStates).WithPath("state")
	}
	loc.UpdatedAt = t.now
	return loc, t.put(bucketSiteLocations, siteLocationKey(loc.Site, loc.Digest, loc.Source), loc)
}

// SiteLocation returns the location of an artifact for a source at a site; false when
// the site's cache does not hold it for that source.
func (t *Tx) SiteLocation(site, digest, source string) (SiteLocation, bool, error) {
	var loc SiteLocation
	found, err := t.get(bucketSiteLocations, siteLocationKey(site, digest, source), &loc)
	return loc, found, err
}

// SiteLocations returns every location at a site, ordered by digest, then source.
func (t *Tx) SiteLocations(site string) ([]SiteLocation, error) {
	prefix := []byte(site + "\x00")
	var out []SiteLocation
	c := t.kv.cursor(bucketSiteLocations)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var loc SiteLocation
		if err := decode(bucketSiteLocations, k, v, &loc); err != nil {
			return nil, err
		}
		out = append(out, loc)
	}
	return out, nil
}

// DeleteSiteLocation drops a location; one not stored is no error.
func (t *Tx) DeleteSiteLocation(site, digest, source string) error {
	return t.del(bucketSiteLocations, siteLocationKey(site, digest, source))
}

// ImageLocation returns the location of an image at a site, its digest's and source's
// there; NOT_FOUND when the site's cache does not hold it for the image's source.
func (t *Tx) ImageLocation(site, imageID string) (ImageLocation, error) {
	img, err := t.Image(imageID)
	if err != nil {
		return ImageLocation{}, err
	}
	loc, found, err := t.SiteLocation(site, img.SHA256, img.Source)
	if err == nil && !found {
		err = proto.Errorf(proto.NotFound, "image %s is not at site %q", imageID, site)
	}
	return loc.of(img), err
}

// ImageLocations returns the location of every image at a site, ordered by image id:
// each location, once for each image of its digest and source, any tenant's.
func (t *Tx) ImageLocations(site string) ([]ImageLocation, error) {
	locs, err := t.SiteLocations(site)
	if err != nil {
		return nil, err
	}
	var out []ImageLocation
	for _, loc := range locs {
		imgs, err := t.ImagesByDigest(loc.Digest)
		if err != nil {
			return nil, err
		}
		for _, img := range imgs {
			if img.Source == loc.Source {
				out = append(out, loc.of(img))
			}
		}
	}
	slices.SortFunc(out, func(a, b ImageLocation) int { return strings.Compare(a.ImageID, b.ImageID) })
	return out, nil
}

// ImageLocationsPage returns one page of ImageLocations, ordered by image id, and the
// cursor of the next page (empty at the end): sites.locations. A page reads the site's
// locations and their images whole, as ImageLocations does: what it bounds is the answer.
func (t *Tx) ImageLocationsPage(site string, p Page) ([]ImageLocation, string, error) {
	locs, err := t.ImageLocations(site)
	if err != nil {
		return nil, "", err
	}
	return PageOf(locs, func(l ImageLocation) []byte { return []byte(l.ImageID) }, p)
}
