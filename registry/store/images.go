package store

import (
	"bytes"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Image is one entry of the image catalog: where an artifact lives, what it is, and
// whether a trusted signer vouched for it. The artifact itself is never stored.
type Image struct {
	ID          string            `json:"id"`
	Tenant      string            `json:"tenantId"`
	Ref         string            `json:"ref"`
	Kind        proto.ImageKind   `json:"kind"`
	Format      proto.ImageFormat `json:"format"`
	Compression proto.Compression `json:"compression"`
	// SHA256 is the artifact's digest as stored, 64 lower-case hex digits.
	SHA256 string `json:"sha256"`
	// SizeBytes is the artifact's size; 0 when it was registered without one (unknown).
	SizeBytes int64  `json:"sizeBytes,omitempty"`
	Source    string `json:"source"`
	// SignerID and Signature (standard base64) are what the registrant sent.
	SignerID  string `json:"signerId,omitempty"`
	Signature string `json:"signature,omitempty"`
	// SignerTenant is the tenant whose allowlist held the signer that verified the image:
	// the image's own tenant, or root for a platform signer.
	SignerTenant string `json:"signerTenantId,omitempty"`
	// Verified is true when the signature verified at registration.
	Verified bool `json:"verified"`
	// Public images are visible to every tenant. Only verified images can be.
	Public     bool      `json:"public"`
	CreatedAt  time.Time `json:"createdAt"`
	PromotedAt time.Time `json:"promotedAt,omitzero"`
}

const (
	bucketImages = "images"
	// bucketImageRefs maps tenant \0 ref to the image id: refs are unique per tenant.
	bucketImageRefs = "image_refs"
	// bucketImageList holds one key per image, under its tenant while private and under
	// the public scope once promoted, ordered by ref then id; the value is its kind.
	bucketImageList = "image_list"
	// bucketImageDigests maps digest \0 tenant \0 id to nothing: the images of an
	// artifact, each tenant's together (format 5 on; digest \0 id before).
	bucketImageDigests = "image_digests"
)

var publicScope = []byte("p\x00")

func tenantScope(tenant string) []byte { return []byte("t\x00" + tenant + "\x00") }

func imageRefKey(tenant, ref string) []byte { return []byte(tenant + "\x00" + ref) }

// imageListKey is the image's key in bucketImageList: its scope, then its sort key.
func imageListKey(img Image) []byte {
	scope := tenantScope(img.Tenant)
	if img.Public {
		scope = publicScope
	}
	return append(scope, imageSortKey(img)...)
}

func imageSortKey(img Image) []byte { return []byte(img.Ref + "\x00" + img.ID) }

// CreateImage stores a new catalog image and returns it with its id (img_ and a
// sortable random part). A ref its tenant holds already is CONFLICT, an image past the
// tenant's bound (TenantBounds.Images) INVALID_STATE, reason quota, at ref.
func (t *Tx) CreateImage(img Image) (Image, error) {
	if _, err := t.Tenant(img.Tenant); err != nil {
		return Image{}, err
	}
	if t.getRaw(bucketImageRefs, imageRefKey(img.Tenant, img.Ref)) != nil {
		return Image{}, proto.Errorf(proto.Conflict, "tenant %q has an image %s already: register a new version", img.Tenant, img.Ref).WithPath("ref")
	}
	if err := t.admit(countImages, img.Tenant, "ref"); err != nil {
		return Image{}, err
	}
	img.ID = newID("img_", t.now)
	img.CreatedAt = t.now
	if err := t.putImage(img, nil); err != nil {
		return Image{}, err
	}
	if err := t.putRaw(bucketImageRefs, imageRefKey(img.Tenant, img.Ref), []byte(img.ID)); err != nil {
		return Image{}, err
	}
	return img, t.putRaw(bucketImageDigests, imageDigestKey(img), nil)
}

// PublishImage makes an image visible to every tenant. An image that is not verified
// is INVALID_STATE: it stays private to its tenant forever.
func (t *Tx) PublishImage(id string) (Image, error) {
	img, err := t.Image(id)
	if err != nil || img.Public {
		return img, err
	}
	old := img
	img.Public = true
	img.PromotedAt = t.now
	return img, t.putImage(img, &old)
}

// putImage is the only write path of images. It refuses a public image that is not
// verified and a verified one that does not record who verified it, and keeps the list
// index in step (old is the stored version, nil for a new image).
func (t *Tx) putImage(img Image, old *Image) error {
	if img.Public && !img.Verified {
		return proto.Errorf(proto.InvalidState, "image %s is not signed by a trusted signer, so it stays private to its tenant", img.Ref).WithReason(proto.ReasonUnsigned)
	}
	if img.Verified && (img.Signature == "" || img.SignerID == "" || img.SignerTenant == "") {
		return proto.Errorf(proto.Internal, "image %s: a verified image must record its signature, signer and the allowlist that verified it", img.Ref)
	}
	if old != nil {
		if err := t.del(bucketImageList, imageListKey(*old)); err != nil {
			return err
		}
	}
	if err := t.putRaw(bucketImageList, imageListKey(img), []byte(img.Kind)); err != nil {
		return err
	}
	return t.put(bucketImages, []byte(img.ID), img)
}

// Image returns one image by id, whoever owns it; NOT_FOUND when there is none.
func (t *Tx) Image(id string) (Image, error) {
	var img Image
	ok, err := t.get(bucketImages, []byte(id), &img)
	if err == nil && !ok {
		err = notFound("image", id)
	}
	return img, err
}

// ImageByRef returns tenant's own image of ref; NOT_FOUND when it has none.
func (t *Tx) ImageByRef(tenant, ref string) (Image, error) {
	id := t.getRaw(bucketImageRefs, imageRefKey(tenant, ref))
	if id == nil {
		return Image{}, notFound("image", ref)
	}
	return t.Image(string(id))
}

// ImagesByDigest returns every catalog image of an artifact, in any tenant, each
// tenant's together.
func (t *Tx) ImagesByDigest(digest string) ([]Image, error) {
	return t.imagesUnder([]byte(digest + "\x00"))
}

// TenantImagesByDigest returns tenant's own images of an artifact, reading none of
// another tenant's: what a registration reads to bound a tenant's copies of one digest,
// however many other tenants' images of it the catalog holds.
func (t *Tx) TenantImagesByDigest(tenant, digest string) ([]Image, error) {
	return t.imagesUnder([]byte(digest + "\x00" + tenant + "\x00"))
}

// imagesUnder returns the images whose bucketImageDigests keys begin with prefix.
func (t *Tx) imagesUnder(prefix []byte) ([]Image, error) {
	var out []Image
	c := t.kv.cursor(bucketImageDigests)
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		img, err := t.Image(string(afterLastNUL(k, nil)))
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil
}

// Images lists what tenant sees of the catalog, its own images and the public ones,
// ordered by ref then id, one page at a time; kind, when set, keeps only that kind. A
// full page offers the next cursor only once an image of the kind follows it, so the
// cursor never leads to an empty page.
func (t *Tx) Images(tenant string, kind proto.ImageKind, p Page) ([]Image, string, error) {
	var after []byte
	if p.Cursor != "" {
		var err error
		if after, err = DecodeCursor(p.Cursor, nil); err != nil {
			return nil, "", err
		}
	}
	own := t.seekIndex(bucketImageList, tenantScope(tenant), after)
	pub := t.seekIndex(bucketImageList, publicScope, after)
	var out []Image
	for {
		c := own
		if c.key == nil || pub.key != nil && bytes.Compare(pub.sortKey(), own.sortKey()) < 0 {
			c = pub
		}
		if c.key == nil {
			return out, "", nil
		}
		sk, k := c.sortKey(), c.value
		c.next()
		if kind != "" && string(k) != string(kind) {
			continue
		}
		if len(out) == p.limit() {
			return out, EncodeCursor(imageSortKey(out[len(out)-1])), nil
		}
		img, err := t.Image(string(sk[bytes.LastIndexByte(sk, 0)+1:]))
		if err != nil {
			return nil, "", err
		}
		out = append(out, img)
	}
}

// indexCursor walks the keys of one scope of an index in order.
type indexCursor struct {
	c          cursor
	prefix     []byte
	key, value []byte
}

// seekIndex starts a walk of prefix at the first key whose sort key is after after.
func (t *Tx) seekIndex(bucket string, prefix, after []byte) *indexCursor {
	ic := &indexCursor{c: t.kv.cursor(bucket), prefix: prefix}
	start := append(bytes.Clone(prefix), after...)
	ic.key, ic.value = ic.c.Seek(start)
	if after != nil && bytes.Equal(ic.key, start) {
		ic.key, ic.value = ic.c.Next()
	}
	ic.clip()
	return ic
}

func (ic *indexCursor) next() {
	ic.key, ic.value = ic.c.Next()
	ic.clip()
}

func (ic *indexCursor) clip() {
	if ic.key != nil && !bytes.HasPrefix(ic.key, ic.prefix) {
		ic.key, ic.value = nil, nil
	}
}

func (ic *indexCursor) sortKey() []byte { return ic.key[len(ic.prefix):] }
