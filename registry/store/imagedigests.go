package store

import (
	"bytes"
	"fmt"
)

// formatDigestTenants is the format that put the tenant in bucketImageDigests' keys.
const formatDigestTenants = 5

// imageDigestKey is the image's key in bucketImageDigests: digest, tenant, id.
func imageDigestKey(img Image) []byte {
	return []byte(img.SHA256 + "\x00" + img.Tenant + "\x00" + img.ID)
}

// imageDigestIndex is bucketImageDigests as a format raise fills it: a store of a format
// before 5 keys it digest NUL id, which the raise rewrites digest NUL tenant NUL id, so
// that a registration reads its own tenant's images of the digest alone
// (TenantImagesByDigest).
var imageDigestIndex = derivedIndex{diff: (*Tx).imageDigestDiff, reindex: (*Tx).reindexImageDigests}

// indexImageDigests rewrites bucketImageDigests in the keys of format 5, MaxPruned
// entries a transaction; the transaction that raises the format does it again
// (finalImageDigests), so that no image a replica of an earlier release registered
// meanwhile is left under its old key, which a registration of its tenant would not count.
func (s *Store) indexImageDigests() error { return s.fill(imageDigestIndex) }

// finalImageDigests is indexImageDigests in the transaction that raises the format
// (fillLast).
func (t *Tx) finalImageDigests() error { return t.fillLast(imageDigestIndex) }

// imageDigestDiff compares bucketImageDigests with every image, as tx reads them: the
// entries of images without theirs, then the entries no image has (a key of an earlier
// format among them), each in key order, and why each image it cannot read was left out.
func (t *Tx) imageDigestDiff() (missing, stray [][]byte, damaged []error) {
	return entriesDiff(t, bucketImages, bucketImageDigests, imageDigestKey)
}

// reindexImageDigests makes each of entries (keys of bucketImageDigests) say what the
// image it names says, as tx reads it: written when that image is of that digest and
// tenant, dropped otherwise (a key of an earlier format too). So a list read in another
// transaction is applied safely.
func (t *Tx) reindexImageDigests(entries [][]byte) error {
	for _, k := range entries {
		var img Image
		found, err := t.get(bucketImages, afterLastNUL(k, nil), &img)
		switch {
		case err != nil:
		case found && bytes.Equal(imageDigestKey(img), k):
			if t.getRaw(bucketImageDigests, k) == nil {
				err = t.putRaw(bucketImageDigests, k, nil)
			}
		default:
			err = t.del(bucketImageDigests, k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkImageDigests is Check's report of bucketImageDigests: each image without its
// entry, which its tenant's registrations do not count toward image.MaxImagesPerDigest
// and a site's report does not locate, and each entry no image has.
func (t *Tx) checkImageDigests() []error {
	missing, stray, errs := t.imageDigestDiff()
	for _, k := range missing {
		errs = append(errs, fmt.Errorf("store: %s/%q has no entry in %s (%q), so its tenant's registrations of the digest do not count it and no site locates it: a write path missed it; report it with this line",
			bucketImages, afterLastNUL(k, nil), bucketImageDigests, k))
	}
	for _, k := range stray {
		errs = append(errs, fmt.Errorf("store: %s/%q names no image (in %s) of that digest and tenant: a write path left it behind; delete it",
			bucketImageDigests, k, bucketImages))
	}
	return errs
}
