package store

import (
	"bytes"
	"slices"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// ImageLocation says that a site's cache holds (or is pulling, or evicting) the artifact
// of a catalog image. Rows are derived from the site agents' cache reports; deploys
// touch them when they use the image and pin them while they stream it.
type ImageLocation struct {
	Site      string                `json:"siteId"`
	ImageID   string                `json:"imageId"`
	Digest    string                `json:"digest"`
	State     proto.ImageCacheState `json:"state"`
	SizeBytes int64                 `json:"sizeBytes"`
	// LastUsed is the latest use, reported by an agent or recorded by a deploy.
	LastUsed time.Time `json:"lastUsed,omitzero"`
	// Pins name the deploys streaming the image now; a pinned row is never dropped.
	Pins      []string  `json:"pins,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
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
	b := t.tx.Bucket([]byte(bucketImageLocations))
	if b == nil {
		return nil, nil
	}
	prefix := []byte(site + "\x00")
	var out []ImageLocation
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var loc ImageLocation
		if err := decode(bucketImageLocations, k, v, &loc); err != nil {
			return nil, err
		}
		out = append(out, loc)
	}
	return out, nil
}

// DeleteImageLocation drops a location. A pinned one is INVALID_STATE: a deploy is
// streaming it.
func (t *Tx) DeleteImageLocation(site, imageID string) error {
	loc, err := t.ImageLocation(site, imageID)
	if err != nil {
		return err
	}
	if len(loc.Pins) > 0 {
		return proto.Errorf(proto.InvalidState, "image %s at site %q is pinned by %v", imageID, site, loc.Pins)
	}
	return t.del(bucketImageLocations, locationKey(site, imageID))
}
