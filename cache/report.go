package cache

import "github.com/better-compute/better-compute/proto"

// Reporter is told the cache's `images` inventory section: every image the cache holds
// or works on, sorted by digest. Calls come from one goroutine, one at a time; changes
// made while a call runs are coalesced into the next call.
type Reporter interface {
	ReportImages(entries []proto.ImageCacheEntry)
}

// ReporterFunc makes a function a Reporter.
type ReporterFunc func(entries []proto.ImageCacheEntry)

// ReportImages calls f.
func (f ReporterFunc) ReportImages(entries []proto.ImageCacheEntry) { f(entries) }
