package proto

// ImageKind says what an image is for: an installed OS, or the ramdisk machines boot to
// be inspected, wiped and deployed.
type ImageKind string

// The image kinds.
const (
	KindOS      ImageKind = "os"
	KindRamdisk ImageKind = "ramdisk"
)

// ImageKinds lists every kind.
var ImageKinds = []ImageKind{KindOS, KindRamdisk}

// CheckRamdiskExtra refuses, as INVALID_STATE with the reason not-ramdisk, an image ref
// of kind as an extra initrd unless it is of kind ramdisk.
func CheckRamdiskExtra(ref string, kind ImageKind) error {
	if kind == KindRamdisk {
		return nil
	}
	return Errorf(InvalidState, "image %s is of kind %s, and only an image of kind ramdisk, signed by a platform signer, may be an extra initrd of a ramdisk boot", ref, kind).WithReason(ReasonNotRamdisk)
}

// ImageFormat is how an image's bytes are laid out once decompressed.
type ImageFormat string

// The image formats: raw and qcow2 are written to disk, an iso is booted as media.
const (
	FormatRaw   ImageFormat = "raw"
	FormatQcow2 ImageFormat = "qcow2"
	FormatISO   ImageFormat = "iso"
)

// ImageFormats lists every format.
var ImageFormats = []ImageFormat{FormatRaw, FormatQcow2, FormatISO}

// Compression is how an image artifact is compressed as stored.
type Compression string

// The compressions.
const (
	CompressionNone Compression = "none"
	CompressionZstd Compression = "zstd"
	CompressionGzip Compression = "gzip"
)

// Compressions lists every compression.
var Compressions = []Compression{CompressionNone, CompressionZstd, CompressionGzip}

// CacheImage is one image a site agent keeps in its cache: an entry of its NodeSpec's
// site.cacheImages. The agent pulls Source, checks the artifact against Digest before
// the copy becomes visible, and serves it to the site's ramdisks by digest.
type CacheImage struct {
	// Ref is the catalog reference, name@version, for people reading the list.
	Ref string `json:"ref"`
	// Digest is the SHA-256 of the artifact as stored, 64 lower-case hex digits.
	Digest string `json:"digest"`
	// Source is where to pull it from: an https:// or oci:// URL.
	Source string `json:"source"`
	// SizeBytes is the artifact's size, for cache planning; 0 (absent) when the catalog
	// does not know it: the cache then bounds the pull by the room it has.
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// Format and Compression describe the artifact.
	Format      ImageFormat `json:"format"`
	Compression Compression `json:"compression"`
}
