package proto

import "time"

// MaxInventoryRecord bounds one inventory section as the registry stores it: its record as
// written, the section compressed when that makes it smaller (package sectionpack). It is
// what one etcd transaction of the default --max-request-bytes (1.5 MiB) takes beside its
// keys, compares and the rest of a section's transaction, and it holds on both of the
// registry's stores alike. A site agent cuts each section it reports so that its stored
// form fits (sectionpack.Fits): a section whose entries are as good as random does not
// compress, and one the registry refused would leave the copy stored before in its place.
const MaxInventoryRecord = 1 << 20

// ImageCacheState is the state of one artifact in a site agent's cache.
type ImageCacheState string

// The cache states.
const (
	// CachePulling: the agent is downloading and checking the artifact; not served yet.
	CachePulling ImageCacheState = "pulling"
	// CacheReady: the artifact's digest matched and it is served.
	CacheReady ImageCacheState = "ready"
	// CacheFailed: the last pull failed (unreachable source, digest mismatch).
	CacheFailed ImageCacheState = "failed"
	// CacheEvicting: the agent is removing the artifact to free space.
	CacheEvicting ImageCacheState = "evicting"
)

// ImageCacheStates lists every cache state.
var ImageCacheStates = []ImageCacheState{CachePulling, CacheReady, CacheFailed, CacheEvicting}

// CacheStateRank orders the cache states from the one a deploy gains most by: ready,
// pulling, evicting, failed (and a state not among them last). The registry ranks an
// image's state across a site's agents by it, and a site keeps the images of its `images`
// section in its order when the section is cut.
func CacheStateRank(s ImageCacheState) int {
	switch s {
	case CacheReady:
		return 0
	case CachePulling:
		return 1
	case CacheEvicting:
		return 2
	case CacheFailed:
		return 3
	}
	return 4
}

// MaxImageCacheSources bounds the sources a cache keeps as verified for one artifact
// (ImageCacheEntry.Sources); a further source is not verified, and its image is not
// served from the cache.
const MaxImageCacheSources = 16

// ImageCacheEntry is one artifact of a site agent's cache, as the agent reports it in the
// `images` section of its inventory.
type ImageCacheEntry struct {
	// Digest is the artifact's SHA-256, 64 lower-case hex digits.
	Digest string `json:"digest"`
	// State is where the artifact is in its life in the cache.
	State ImageCacheState `json:"state"`
	// SizeBytes is the bytes it takes (so far, while pulling).
	SizeBytes int64 `json:"sizeBytes"`
	// LastUsed is when a ramdisk last streamed it; zero when never.
	LastUsed time.Time `json:"lastUsed,omitzero"`
	// Sources are the sources (https:// or oci:// URLs, as the site's cacheImages name
	// them) the entry is for. Of a file (ready, evicting, or pulling while it is checked
	// after a restart): those whose bytes the cache pulled and found to hash to Digest,
	// sorted, at most MaxImageCacheSources. Of a pull with no file yet (pulling, failed):
	// the source pulled from. The registry records a location only for a catalog image
	// whose source is one of them, so the copy serves no image of the digest whose source
	// never served its bytes; an entry without sources (a site agent from before sources
	// were kept) gives no location.
	Sources []string `json:"sources,omitempty"`
	// Reason says why a failed entry's last pull failed, when the cache has a word for it
	// (ImageCacheReasons): ReasonSourceNotAllowed, a request of the fetch (the source's, a
	// redirect's, a token realm's) or an address a name led to was outside the site's
	// image sources; ReasonCapacity, the image does not fit the cache. Empty for other
	// failures and other states.
	Reason string `json:"reason,omitempty"`
	// RefusedHost is, with ReasonSourceNotAllowed, the host and port the fetch was refused
	// at (HOST:PORT, [IPV6]:PORT; an address refused before its host was known, the
	// address): the host the site's image sources lack, never the refused request's URL,
	// whose query may carry a presigned secret. At most MaxRefusedHost bytes.
	RefusedHost string `json:"refusedHost,omitempty"`
	// Refused are the other sources of the entry whose last pull or check the site's
	// image sources refused (ReasonSourceNotAllowed): of a ready file, a source the cache
	// checked it against and was refused at; of any entry, a source refused before the
	// one it pulls now. The entry's own state stays what its Sources give: a ready file
	// stays ready for them. Sorted by source, at most MaxImageCacheSources, none of
	// Sources, and not the source a failed entry's Reason is about.
	Refused []RefusedSource `json:"refused,omitempty"`
}

// RefusedSource is a source of an ImageCacheEntry whose fetch the site's image sources
// refused, with the host and port it was refused at (ImageCacheEntry.RefusedHost's
// shape).
type RefusedSource struct {
	Source      string `json:"source"`
	RefusedHost string `json:"refusedHost"`
}

// ImageCacheReasons are the reasons a failed ImageCacheEntry may give.
var ImageCacheReasons = []string{ReasonSourceNotAllowed, ReasonCapacity}

// MaxRefusedHost bounds ImageCacheEntry.RefusedHost: a host name of 253 bytes, or a
// bracketed IPv6 address, and a port.
const MaxRefusedHost = 261
