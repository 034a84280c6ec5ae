package store

import (
	"bytes"
	"slices"
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

// ImageLocationsPage returns one page of a site's ImageLocations and the cursor of the
// next page (empty at the end): sites.locations. It walks the site's locations in key
// order (by digest, then source) and, for each, the images of its digest in the index's
// order (by tenant, then id), keeping those of its source: every image of any tenant
// located there, once. The cursor names the location and image the page ended at, so
// a page reads from there: the locations it visits (each locates an image of its
// source, so at most two more than it answers: the one it resumes, the one after), the
// images it answers and the one after them, and the images of a visited digest from
// another source, which it skips (a tenant holds at most image.MaxImagesPerDigest of a
// digest). A cursor of another form (another site's, one cut short, or the image id
// the list once paged by) is INVALID_INPUT at cursor.
func (t *Tx) ImageLocationsPage(site string, p Page) ([]ImageLocation, string, error) {
	prefix := []byte(site + "\x00")
	from, afterImage := prefix, []byte(nil)
	if p.Cursor != "" {
		key, err := DecodeCursor(p.Cursor, prefix)
		if err != nil {
			return nil, "", err
		}
		// The cursor is a location's key, NUL, then its image's key under the digest
		// (tenant NUL id): the last two NULs part them.
		rest := key[len(prefix):]
		tenant := bytes.LastIndexByte(rest[:max(bytes.LastIndexByte(rest, 0), 0)], 0)
		if tenant <= 0 {
			return nil, "", errForeignCursor()
		}
		from, afterImage = key[:len(prefix)+tenant], rest[tenant+1:]
	}
	var out []ImageLocation
	var last []byte
	c := t.kv.cursor(bucketSiteLocations)
	for k, v := c.Seek(from); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var loc SiteLocation
		if err := decode(bucketSiteLocations, k, v, &loc); err != nil {
			return nil, "", err
		}
		var after []byte
		if bytes.Equal(k, from) {
			after = afterImage
		}
		for imgs := t.seekIndex(bucketImageDigests, []byte(loc.Digest+"\x00"), after); imgs.key != nil; imgs.next() {
			img, err := t.Image(string(afterLastNUL(imgs.key, nil)))
			switch {
			case err != nil:
				return nil, "", err
			case img.Source != loc.Source:
				continue
			case len(out) == p.limit():
				return out, EncodeCursor(last), nil
			}
			out = append(out, loc.of(img))
			last = append(append(append(last[:0], k...), 0), imgs.sortKey()...)
		}
	}
	return out, "", nil
}
