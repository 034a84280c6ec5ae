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
}
