package image

import (
	"regexp"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

var sha256Hex = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

// RegisterRequest is what images.register takes: the catalog fields of an image.
type RegisterRequest struct {
	Ref         string            `json:"ref"`
	Kind        proto.ImageKind   `json:"kind,omitempty"`
	Format      proto.ImageFormat `json:"format"`
	Compression proto.Compression `json:"compression,omitempty"`
	SHA256      string            `json:"sha256"`
	// SizeBytes is the artifact's size; nil (absent) when unknown: the site caches learn
	// it when they pull the image.
	SizeBytes *int64 `json:"sizeBytes,omitempty"`
	Source    string `json:"source"`
	SignerID  string `json:"signerId,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// Register checks req field by field (the first bad one is INVALID_INPUT naming its
// path), verifies its signature when it has one, and stores the image for tenant. A
// signature must verify against the named signer of the tenant's allowlist or the
// platform's (a ramdisk: the platform's only); an image without one is stored
// unverified and stays private.
func Register(tx *store.Tx, v Verifier, tenant string, req RegisterRequest) (store.Image, error) {
	img, sig, err := validate(req)
	if err != nil {
		return store.Image{}, err
	}
	img.Tenant = tenant
	if sig != nil {
		signerTenant, err := v.Verify(tx, allowlists(tenant, img.Kind), img.SignerID, SigningInput(img), sig)
		if err != nil {
			return store.Image{}, err
		}
		img.SignerTenant, img.Verified = signerTenant, true
	} else if img.Kind == proto.KindRamdisk {
		return store.Image{}, proto.Errorf(proto.InvalidInput, "a ramdisk image must be signed by a platform signer: add signerId and signature").WithPath("signature")
	}
	if err := checkCopies(tx, tenant, img.SHA256); err != nil {
		return store.Image{}, err
	}
	return tx.CreateImage(img)
}

// MaxImagesPerDigest bounds how many images of one artifact (one sha256, whatever their
// sources) a tenant may register. A site's report reads every image of each digest it
// changes (syncSite), and each image once had a location of its own, written in the
// report's transaction: tenant beta registering 5,000 images of acme's public digest and
// source made that transaction more than etcd takes, at every report of the site, and
// its locations stopped following its cache for every tenant. A location is now kept once
// for a site, digest and source (store format 6), so the writes no longer grow with the
// images; the bound still keeps what a report reads. A tenant names one artifact under a
// few refs at most; docs/images.md gives what the site's transaction takes.
const MaxImagesPerDigest = 64

// checkCopies refuses a new image of digest for tenant when it holds MaxImagesPerDigest
// of the digest already: INVALID_INPUT at sha256, naming one to reuse. It reads the
// tenant's own images of the digest alone: before, it read every tenant's, 10,000 keys a
// registration beside 5,000 images of the digest (TestARegistrationReadsItsOwnTenantsImagesOfADigest).
func checkCopies(tx *store.Tx, tenant, digest string) error {
	imgs, err := tx.TenantImagesByDigest(tenant, digest)
	if err != nil || len(imgs) < MaxImagesPerDigest {
		return err
	}
	own := make([]string, len(imgs))
	for i, img := range imgs {
		own[i] = img.Ref
	}
	return proto.Errorf(proto.InvalidInput, "tenant %q has %d images of sha256 %s already, the most a tenant may register of one artifact: reuse one of them (%s, say) rather than registering it again",
		tenant, len(own), digest, slices.Min(own)).WithPath("sha256")
}

// validate turns a request into the image to store (without tenant or verification)
// and its decoded signature, or names the first bad field.
func validate(req RegisterRequest) (store.Image, []byte, error) {
	invalid := func(path, format string, args ...any) (store.Image, []byte, error) {
		return store.Image{}, nil, proto.Errorf(proto.InvalidInput, format, args...).WithPath(path)
	}
	img := store.Image{
		Ref: req.Ref, Kind: req.Kind, Format: req.Format, Compression: req.Compression,
		SHA256: strings.ToLower(req.SHA256), Source: req.Source,
		SignerID: req.SignerID,
	}
	if _, err := ParseRef(req.Ref); err != nil {
		return store.Image{}, nil, err
	}
	if img.Kind == "" {
		img.Kind = proto.KindOS
	}
	if !slices.Contains(proto.ImageKinds, img.Kind) {
		return invalid("kind", "kind %q: use one of %v", req.Kind, proto.ImageKinds)
	}
	if !slices.Contains(proto.ImageFormats, img.Format) {
		return invalid("format", "format %q: use one of %v", req.Format, proto.ImageFormats)
	}
	if img.Compression == "" {
		img.Compression = proto.CompressionNone
	}
	if !slices.Contains(proto.Compressions, img.Compression) {
		return invalid("compression", "compression %q: use one of %v", req.Compression, proto.Compressions)
	}
	if !sha256Hex.MatchString(req.SHA256) {
		return invalid("sha256", "sha256 must be the 64 hex digits of the artifact's SHA-256 as stored (sha256sum prints them)")
	}
	if req.SizeBytes != nil {
		if n := *req.SizeBytes; n < 1 || n > proto.MaxImageBytes {
			return invalid("sizeBytes", "sizeBytes must be the artifact's size, 1 to %d, or absent when unknown", int64(proto.MaxImageBytes))
		}
		img.SizeBytes = *req.SizeBytes
	}
	src, err := ParseSource(req.Source)
	if err != nil {
		return store.Image{}, nil, err
	}
	if src.Digest != "" && src.Digest != img.SHA256 {
		return invalid("source", "the oci:// source names blob sha256:%s, but the image's sha256 is %s", src.Digest, img.SHA256)
	}
	switch {
	case req.SignerID == "" && req.Signature == "":
		return img, nil, nil
	case req.Signature == "":
		return invalid("signature", "signerId goes with a signature: give both or neither")
	case req.SignerID == "":
		return invalid("signerId", "a signature goes with the signerId of the key that made it: give both or neither")
	}
	if err := CheckSignerID(req.SignerID); err != nil {
		return store.Image{}, nil, err
	}
	sig, err := DecodeSignature(req.Signature)
	if err != nil {
		return store.Image{}, nil, err
	}
	img.Signature = encodeSignature(sig)
	return img, sig, nil
}
