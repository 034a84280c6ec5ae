package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// digestImages registers, in transactions of 500, perTenant images of digest for each of
// tenants (created first), refs r0, r1 and so on.
func digestImages(t *testing.T, s *Store, digest string, tenants []string, perTenant int) {
	t.Helper()
	type one struct{ tenant, ref string }
	var all []one
	for _, tn := range tenants {
		for i := range perTenant {
			all = append(all, one{tn, fmt.Sprintf("r%d", i)})
		}
	}
	mustUpdate(t, s, func(tx *Tx) error {
		for _, tn := range tenants {
			if _, err := tx.CreateTenant(tn); err != nil {
				return err
			}
		}
		return nil
	})
	for len(all) > 0 {
		chunk := all[:min(500, len(all))]
		all = all[len(chunk):]
		mustUpdate(t, s, func(tx *Tx) error {
			for _, o := range chunk {
				img := testImage(o.tenant, o.ref, false)
				img.SHA256 = digest
				if _, err := tx.CreateImage(img); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// TestARegistrationReadsItsOwnTenantsImagesOfADigest: what images.register reads of the
// store (its tenant's images of the digest, for image.MaxImagesPerDigest, then the
// creation) is as many keys beside 5,040 other tenants' images of the digest as beside
// none (one more: the first key past acme's), and finds acme's 3 images alone. Before, the registration read every
// tenant's images of the digest, each by its index key and its record: 10,089 keys beside
// them, 9 beside none.
func TestARegistrationReadsItsOwnTenantsImagesOfADigest(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		digest := strings.Repeat("ab", 32)
		digestImages(t, s, digest, []string{"acme"}, 3)
		register := func() (reads int, own []Image) {
			err := s.Update(func(tx *Tx) error {
				tx.kv = countingKV{tx.kv, &reads}
				var err error
				if own, err = tx.TenantImagesByDigest("acme", digest); err != nil {
					return err
				}
				img := testImage("acme", "new", false)
				img.SHA256 = digest
				if _, err := tx.CreateImage(img); err != nil {
					return err
				}
				return errRollback
			})
			if !errors.Is(err, errRollback) {
				t.Fatal(err)
			}
			return reads, own
		}
		alone, _ := register()
		others := make([]string, 80)
		for i := range others {
			others[i] = fmt.Sprintf("tenant-%d", i)
		}
		digestImages(t, s, digest, others, 63)
		beside, own := register()
		// The walk of acme's entries lands on the first key past them, which beside none
		// there is not: one key more, whatever the number of other tenants' images.
		if beside > alone+1 {
			t.Errorf("a registration of acme read %d keys beside 5,040 other tenants' images of its digest, %d beside none: want one more at most", beside, alone)
		}
		var refs []string
		for _, img := range own {
			if img.Tenant == "acme" {
				refs = append(refs, img.Ref)
			}
		}
		slices.Sort(refs)
		if want := []string{"r0", "r1", "r2"}; len(own) != 3 || !slices.Equal(refs, want) {
			t.Errorf("acme's images of the digest: %d, of them acme's %v, want %v alone", len(own), refs, want)
		}
		s.View(func(tx *Tx) error {
			all, err := tx.ImagesByDigest(digest)
			if err != nil || len(all) != 3+80*63 {
				t.Errorf("every image of the digest: %d (%v), want %d", len(all), err, 3+80*63)
			}
			return nil
		})
	})
}

// TestAStoreOfFormat4IsIndexedByDigestAndTenantAsItIsRaised: a store of format 4 keys
// image_digests digest NUL id, which Check of it as it is takes. Opened, it is raised to
// Format, over more than one transaction, with every image under its digest and tenant
// and the old keys gone, one naming an image under another digest among them: each
// tenant's images of a digest are its own, and Check finds nothing. Check of format 5
// reports an image without its entry.
func TestAStoreOfFormat4IsIndexedByDigestAndTenantAsItIsRaised(t *testing.T) {
	eachPlace(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		digests := []string{strings.Repeat("1", 64), strings.Repeat("2", 64)}
		digestImages(t, s, digests[0], []string{"acme", "beta"}, 400)
		digestImages(t, s, digests[1], []string{"gamma"}, MaxPruned/2)
		// As a release of format 4 left it: digest NUL id, and one naming an image of
		// another digest.
		var imgs []Image
		s.View(func(tx *Tx) error {
			for _, d := range digests {
				of, err := tx.ImagesByDigest(d)
				if err != nil {
					t.Fatal(err)
				}
				imgs = append(imgs, of...)
			}
			return nil
		})
		for i := 0; i < len(imgs); i += 500 {
			mustUpdate(t, s, func(tx *Tx) error {
				for _, img := range imgs[i:min(i+500, len(imgs))] {
					if err := tx.del(bucketImageDigests, imageDigestKey(img)); err != nil {
						return err
					}
					if err := tx.putRaw(bucketImageDigests, []byte(img.SHA256+"\x00"+img.ID), nil); err != nil {
						return err
					}
				}
				return nil
			})
		}
		stray := []byte(strings.Repeat("3", 64) + "\x00" + imgs[0].ID)
		mustUpdate(t, s, func(tx *Tx) error { return tx.putRaw(bucketImageDigests, stray, nil) })
		s = raisedFrom(t, s, open, clk.Now, "4")
		s.View(func(tx *Tx) error {
			for _, c := range []struct {
				tenant, digest string
				want           int
			}{{"acme", digests[0], 400}, {"beta", digests[0], 400}, {"gamma", digests[0], 0}, {"gamma", digests[1], MaxPruned / 2}, {"acme", strings.Repeat("3", 64), 0}} {
				own, err := tx.TenantImagesByDigest(c.tenant, c.digest)
				if err != nil || len(own) != c.want || slices.ContainsFunc(own, func(img Image) bool { return img.Tenant != c.tenant || img.SHA256 != c.digest }) {
					t.Errorf("%s's images of %s…: %d (%v), want %d of its own", c.tenant, c.digest[:4], len(own), err, c.want)
				}
			}
			if tx.getRaw(bucketImageDigests, stray) != nil {
				t.Errorf("the key of format 4 naming an image of another digest is kept")
			}
			return nil
		})

		mustUpdate(t, s, func(tx *Tx) error { return tx.del(bucketImageDigests, imageDigestKey(imgs[1])) })
		if err := s.Check(); err == nil || !strings.Contains(err.Error(), "has no entry in image_digests") {
			t.Errorf("Check of an image without its entry: %v", err)
		}
		mustUpdate(t, s, func(tx *Tx) error { return tx.putRaw(bucketImageDigests, imageDigestKey(imgs[1]), nil) })
	})
}
