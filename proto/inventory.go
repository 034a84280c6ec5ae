package proto

import "time"

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
	// them) whose bytes the cache pulled and found to hash to Digest, sorted, at most
	// MaxImageCacheSources. The copy serves only a catalog image whose source is one of
	// them: the registry records no location for any other image of the digest, and none
	// at all for an entry without sources (a site agent from before sources were kept).
	Sources []string `json:"sources,omitempty"`
}
