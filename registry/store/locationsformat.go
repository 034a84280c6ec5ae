package store

import (
	"fmt"
	"slices"

	"github.com/better-compute/better-compute/proto"
)

// formatSiteLocations is the format that stores a site's location once for its digest
// and source (bucketSiteLocations) rather than once for each image of them
// (bucketImageLocations), so that a site's report writes as many keys for a digest
// whatever number of images, of any tenants, name it.
const formatSiteLocations = 6

// bucketImageLocations held an ImageLocation for each image at a site, keyed site NUL
// image id (formats before 6). The raise to format 6 moves each into
// bucketSiteLocations; nothing else reads or writes it.
const bucketImageLocations = "image_locations"

// imageLocationMove is bucketImageLocations' move into bucketSiteLocations as a format
// raise does it: each key left is moved, then deleted.
var imageLocationMove = derivedIndex{diff: (*Tx).imageLocationsLeft, reindex: (*Tx).moveImageLocations}

// moveImageLocations moves the locations of format 5 into bucketSiteLocations, MaxPruned
// a transaction; the transaction that raises the format does it again
// (finalImageLocations), so that no location a replica of an earlier release wrote
// meanwhile is left behind.
func (s *Store) moveImageLocations() error { return s.fill(imageLocationMove) }

// finalImageLocations is moveImageLocations in the transaction that raises the format
// (fillLast).
func (t *Tx) finalImageLocations() error { return t.fillLast(imageLocationMove) }

// imageLocationsLeft lists the keys of bucketImageLocations in key order, each a
// location not moved yet.
func (t *Tx) imageLocationsLeft() (left, _ [][]byte, _ []error) {
	c := t.kv.cursor(bucketImageLocations)
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		left = append(left, slices.Clone(k))
	}
	return left, nil, nil
}

// moveImageLocations moves each of keys (of bucketImageLocations), as tx reads it, into
// the location of its image's digest and source at its site (mergeSiteLocation) and
// deletes it; a key gone meanwhile is skipped, and one whose image is gone only deleted.
func (t *Tx) moveImageLocations(keys [][]byte) error {
	for _, k := range keys {
		var old ImageLocation
		found, err := t.get(bucketImageLocations, k, &old)
		if err != nil || !found {
			if err != nil {
				return err
			}
			continue
		}
		img, err := t.Image(old.ImageID)
		switch {
		case proto.CodeOf(err) == proto.NotFound:
		case err != nil:
			return err
		default:
			if err := t.mergeSiteLocation(old, img); err != nil {
				return err
			}
		}
		if err := t.del(bucketImageLocations, k); err != nil {
			return err
		}
	}
	return nil
}

// mergeSiteLocation writes old, img's location of format 5, as the location of img's
// digest and source at its site: the images of one digest and source had one location
// each, which said the same but for the latest use and the time each was written, so
// the one written last gives the state, size and reason, and the latest use of any is
// kept.
func (t *Tx) mergeSiteLocation(old ImageLocation, img Image) error {
	key := siteLocationKey(old.Site, img.SHA256, img.Source)
	loc := old.SiteLocation
	loc.Digest, loc.Source = img.SHA256, img.Source
	var cur SiteLocation
	found, err := t.get(bucketSiteLocations, key, &cur)
	if err != nil {
		return err
	}
	if found && cur.UpdatedAt.After(loc.UpdatedAt) {
		loc, cur = cur, loc
	}
	if found && cur.LastUsed.After(loc.LastUsed) {
		loc.LastUsed = cur.LastUsed
	}
	return t.put(bucketSiteLocations, key, loc)
}

// checkSiteLocations is Check's report of the locations of a store of format 6 on: each
// location of format 5 the raise did not move, whose image the site does not locate
// until its next report that changes, and each location of a site, digest and source no
// catalog image has (a site's report locates only those images have), which no read
// shows.
func (t *Tx) checkSiteLocations() []error {
	var errs []error
	left, _, _ := t.imageLocationsLeft()
	for _, k := range left {
		errs = append(errs, fmt.Errorf("store: %s/%q was not moved into %s by the raise to format %d, so its image is not located at its site until the site's next report that changes: report it with this line",
			bucketImageLocations, k, bucketSiteLocations, formatSiteLocations))
	}
	c := t.kv.cursor(bucketSiteLocations)
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var loc SiteLocation
		if err := decode(bucketSiteLocations, k, v, &loc); err != nil {
			continue // the record buckets' check reports it
		}
		imgs, err := t.ImagesByDigest(loc.Digest)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, siteErr := t.Site(loc.Site)
		if siteErr != nil || !slices.ContainsFunc(imgs, func(img Image) bool { return img.Source == loc.Source }) ||
			string(siteLocationKey(loc.Site, loc.Digest, loc.Source)) != string(k) {
			errs = append(errs, fmt.Errorf("store: %s/%q names no site and catalog image of that digest and source: a write path left it behind; delete it",
				bucketSiteLocations, k))
		}
	}
	return errs
}
