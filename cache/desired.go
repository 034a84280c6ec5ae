package cache

import (
	"errors"
	"fmt"
	"maps"

	"github.com/better-compute/better-compute/fetch"
	"github.com/better-compute/better-compute/proto"
)

// SetDesired makes list (the site's NodeSpec `site.cacheImages`) what the cache holds:
// every image of it is pulled unless ready, in list order. An image no longer desired
// stops being pulled (its partial file goes) and, when ready, stays until capacity is
// needed: it is then an eviction candidate like any unpinned, unread ready image.
//
// One digest may be listed with several sources (images of several tenants, or several
// sources of one): the file is pulled once, from the first source that works, and each
// other source is then pulled again as a check, its bytes discarded, so that the file is
// served for an image only when its own source was seen to serve those bytes
// (proto.ImageCacheEntry.Sources). A source that fails is tried again RetryInterval
// later; the others are tried meanwhile.
//
// Entries with a bad digest are skipped; other problems (a bad source, an oci:// digest
// that is not the image's) are reported when the pull fails. The error returned names
// every problem with its path, `site.cacheImages[i].field`; the rest of the list applies.
func (c *Cache) SetDesired(list []proto.CacheImage) error {
	var errs []error
	keep := make([]proto.CacheImage, 0, len(list))
	wanted := make(map[string]bool, len(list))
	pairs := make(map[[2]string]bool, len(list))
	for i, img := range list {
		at := fmt.Sprintf("site.cacheImages[%d]", i)
		if !proto.IsDigest(img.Digest) {
			errs = append(errs, proto.Errorf(proto.InvalidConfig, "digest %q is not 64 lower-case hex digits", img.Digest).WithPath(at+".digest"))
			continue
		}
		pair := [2]string{img.Digest, img.Source}
		if pairs[pair] {
			errs = append(errs, proto.Errorf(proto.InvalidConfig, "digest %s is listed twice with source %s", img.Digest, img.Source).WithPath(at+".digest"))
			continue
		}
		if src, err := fetch.Parse(img.Source); err != nil {
			errs = append(errs, proto.Errorf(proto.InvalidConfig, "%v", err).WithPath(at+".source"))
		} else if src.Kind == fetch.OCI && src.Digest != img.Digest {
			errs = append(errs, proto.Errorf(proto.InvalidConfig, "oci source names blob %s, not the image's digest", src.Digest).WithPath(at+".source"))
		}
		if img.SizeBytes < 0 {
			errs = append(errs, proto.Errorf(proto.InvalidConfig, "size %d is negative", img.SizeBytes).WithPath(at+".sizeBytes"))
			img.SizeBytes = 0
		}
		wanted[img.Digest], pairs[pair] = true, true
		keep = append(keep, img)
	}

	c.mu.Lock()
	c.desired, c.wanted = keep, wanted
	var werr error
	for _, img := range keep {
		if c.entries[img.Digest] == nil {
			e := &entry{rec: record{Digest: img.Digest, Ref: img.Ref, Source: img.Source, SizeBytes: img.SizeBytes, State: proto.CachePulling}}
			c.entries[img.Digest] = e
			werr = errors.Join(werr, c.idx.put(e.rec))
		}
	}
	for d, e := range c.entries {
		// A source the list no longer names is forgotten: named again, it is tried at once.
		maps.DeleteFunc(e.failed, func(src string, _ failure) bool { return !pairs[[2]string{d, src}] })
		if wanted[d] || e.verify || e.rec.State == proto.CacheReady || e.rec.State == proto.CacheEvicting {
			continue
		}
		if e.busy {
			e.cancel() // the pull's end drops it
			continue
		}
		werr = errors.Join(werr, c.drop(e))
	}
	c.mu.Unlock()
	c.notify()
	c.kick()
	if werr != nil {
		errs = append(errs, proto.Errorf(proto.Internal, "write cache index: %w", werr))
	}
	return errors.Join(errs...)
}

// drop forgets an image that holds no ready file: its partial file and record go.
// c.mu is held.
func (c *Cache) drop(e *entry) error {
	d := e.rec.Digest
	delete(c.entries, d)
	delete(c.dirty, d)
	return errors.Join(removeFile(c.partialPath(d)), c.idx.remove(d))
}
