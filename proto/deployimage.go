package proto

import "cmp"

// DeployImage is the input of deploy.image. The ramdisk tries CacheURL first, falls
// back to Source, and reports the SHA-256 of what it read; the registry checks it
// against SHA256.
type DeployImage struct {
	// Ref is the catalog reference, name@version, for logs.
	Ref string `json:"ref"`
	// Source is where the artifact lives: an https:// or oci:// URL, the fallback when
	// the cache does not deliver. Empty when the image sources of the machine's site (or
	// pool) do not allow its host: the ramdisk then streams from CacheURL alone.
	Source string `json:"source"`
	// ImageSources is where a fetch from Source may go (set with Source): every request of
	// it, a redirect's and a token realm's too, and every address it dials, as
	// SourceBound says, for the machine's site and pool. A command without it (from a
	// registry of an earlier version) bounds the fetch to Source's own host and port.
	ImageSources *SourceBound `json:"imageSources,omitempty"`
	// CacheURL is where the machine's site cache serves the artifact; empty when the
	// site does not hold it.
	CacheURL string `json:"cacheUrl,omitempty"`
	// SHA256 is the catalog's digest of the artifact as stored: 64 lower-case hex digits.
	SHA256 string `json:"sha256"`
	// Format is raw or qcow2; Compression is none, zstd or gzip.
	Format      string `json:"format"`
	Compression string `json:"compression"`
	SizeBytes   int64  `json:"sizeBytes,omitempty"`
	// UserDataRef is the secret reference of the user data to install with the image;
	// empty when the profile has none. UserDataKind is cloud-init, ignition or talos.
	UserDataRef  string `json:"userDataRef,omitempty"`
	UserDataKind string `json:"userDataKind,omitempty"`
	// UserData is the document UserDataRef names. The registry never stores it with the
	// command: it opens it from the secret store as it delivers the command, and only
	// to the ramdisk of the node the document was rendered for.
	UserData []byte `json:"userData,omitempty"`
}

// DeployImageResult is the answer to deploy.image.
type DeployImageResult struct {
	// SHA256 is the digest of the artifact the ramdisk read, as stored.
	SHA256 string `json:"sha256"`
	// BytesWritten is how much it wrote to the disk.
	BytesWritten int64 `json:"bytesWritten"`
}

// Where deploy.image streams an image from: the site's cache, else the image's source.
const (
	DeployFromCache  = "cache"
	DeployFromSource = "source"
)

// MaxImageBytes is the largest image size: 2^53-1, the largest whole number every JSON
// reader keeps exactly. The catalog registers no image larger.
const MaxImageBytes = 1<<53 - 1

// ProgressBounds are the most a deploy.image of in reads and writes, up to which the
// registry counts what its progress reports tell: the image's size as stored when the
// catalog knows it (a raw image stored uncompressed writes no more than it reads), else
// MaxImageBytes.
func (in DeployImage) ProgressBounds() (read, written int64) {
	read, written = MaxImageBytes, MaxImageBytes
	if in.SizeBytes > 0 {
		read = in.SizeBytes
		if ImageFormat(in.Format) == FormatRaw && Compression(cmp.Or(in.Compression, string(CompressionNone))) == CompressionNone {
			written = in.SizeBytes
		}
	}
	return read, written
}

// DeployImageProgress is the progress detail of a running deploy.image.
type DeployImageProgress struct {
	// Location is where the image streams from: DeployFromCache or DeployFromSource.
	Location string `json:"location"`
	// Read of SizeBytes bytes of the artifact as stored have arrived (SizeBytes 0 when
	// unknown).
	Read      int64 `json:"read"`
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// BytesWritten went to the disk; Skipped zero bytes were left out where the disk
	// reads zeros.
	BytesWritten int64 `json:"bytesWritten"`
	Skipped      int64 `json:"skipped"`
}
