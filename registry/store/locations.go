package store

import (
	"bytes"
	"slices"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// ImageLocation says that a site's cache holds (or is pulling, or evicting) the artifact
// of a catalog image. Rows are derived from the site agents' cache reports alone: the
// site's cache decides what to evict, never the registry (docs/images.md).
type ImageLocation struct {
	Site      string                `json:"siteId"`
	ImageID   string                `json:"imageId"`
	Digest    string                `json:"digest"`
	State     proto.ImageCacheState `json:"state"`
	SizeBytes int64                 `json:"sizeBytes"`
	// LastUsed is the latest use the site's agents reported.
	LastUsed time.Time `json:"lastUsed,omitzero"`
	// Reason and RefusedHost are why the image failed at the site, as the agent whose
	// entry gave the state reported it (proto.ImageCacheEntry's); empty when it gave none.
	Reason      string    `json:"reason,omitempty"`
	RefusedHost string    `json:"refusedHost,omitempty"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

const bucketImageLocations = "image_locations"

func locationKey(site, imageID string) []byte { return []byte(site + "\x00" + imageID) }

// PutImageLocation writes a location of an existing image at an existing site.
func (t *Tx) PutImageLocation(loc ImageLocation) (ImageLocation, error) {
	if _, err := t.Site(loc.Site); err != nil {
		return loc, err
	}
	img, err := t.Image(loc.ImageID)
	if err != nil {
		return loc, err
	}
	if !slices.Contains(proto.ImageCacheStates, loc.State) {
		return loc, proto.Errorf(proto.InvalidInput, "location state %q: use one of %v", loc.State, proto.ImageCacheStates).WithPath("state")
	}
	loc.Digest = img.SHA256
	loc.UpdatedAt = t.now
	return loc, t.put(bucketImageLocations, locationKey(loc.Site, loc.ImageID), loc)
}

// ImageLocation returns the location of an image at a site; NOT_FOUND when the site's
// cache does not hold it.
func (t *Tx) ImageLocation(site, imageID string) (ImageLocation, error) {
	var loc ImageLocation
	ok, err := t.get(bucketImageLocations, locationKey(site, imageID), &loc)
	if err == nil && !ok {
		err = proto.Errorf(proto.NotFound, "image %s is not at site %q", imageID, site)
	}
	return loc, err
}

// ImageLocations returns every location at a site, ordered by image id.
func (t *Tx) ImageLocations(site string) ([]ImageLocation, error) {
	prefix := []byte(site + "\x00")
	var out []ImageLocation
	c := t.kv.cursor(bucketImageLocations)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var loc ImageLocation
		if err := decode(bucketImageLocations, k, v, &loc); err != nil {
			return nil, err
		}
		out = append(out, loc)
	}
	return out, nil
}

// ImageLocationsPage returns one page of the locations at a site, ordered by image id,
// and the cursor of the next page (empty at the end): sites.locations.
func (t *Tx) ImageLocationsPage(site string, p Page) ([]ImageLocation, string, error) {
	var out []ImageLocation
	next, err := t.scan(bucketImageLocations, []byte(site+"\x00"), p, func(k, v []byte) (func(), error) {
		var loc ImageLocation
		if err := decode(bucketImageLocations, k, v, &loc); err != nil {
			return nil, err
		}
		return func() { out = append(out, loc) }, nil
	})
	return out, next, err
}

// DeleteImageLocation drops a location.
func (t *Tx) DeleteImageLocation(site, imageID string) error {
	if _, err := t.ImageLocation(site, imageID); err != nil {
		return err
	}
	return t.del(bucketImageLocations, locationKey(site, imageID))
}
