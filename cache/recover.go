package cache

import (
	"fmt"
	"os"

	"github.com/better-compute/better-compute/proto"
)

// recover loads the index and squares it with the files a crash may have left:
//   - every file in sha256/ is re-hashed before it is served (entry.verify), and one the
//     index does not know (a crash between the rename and the index write) gets a record;
//   - a record in state evicting has its file removed and goes;
//   - a ready record without its file goes back to pulling, without sources (the sources
//     a file was checked against are kept with it, in its record);
//   - a file in partial/ is kept only for a record in state pulling without a ready file;
//   - anything else in sha256/ or partial/ is removed.
func (c *Cache) recover() error {
	recs, err := c.idx.all()
	if err != nil {
		return err
	}
	ready, err := listDigests(c.readyDir)
	if err != nil {
		return err
	}
	partials, err := listDigests(c.partialDir)
	if err != nil {
		return err
	}
	var changed []record
	for _, r := range recs {
		if r.State == proto.CacheEvicting {
			if err := removeFile(c.readyPath(r.Digest)); err != nil {
				return err
			}
			if err := c.idx.remove(r.Digest); err != nil {
				return err
			}
			delete(ready, r.Digest)
			continue
		}
		e := &entry{rec: r}
		c.entries[r.Digest] = e
		if r.State == proto.CacheFailed && r.Source != "" {
			e.failed = map[string]failure{r.Source: {at: r.FailedAt, refused: r.Reason == proto.ReasonSourceNotAllowed, refusedHost: r.RefusedHost}}
		}
		switch size, ok := ready[r.Digest]; {
		case ok && size >= 0:
			e.verify = true
			e.rec.SizeBytes = size
		case r.Sources != nil || r.State == proto.CacheReady:
			e.rec.State, e.rec.Sources = proto.CachePulling, nil
			changed = append(changed, e.rec)
		}
	}
	for d, size := range ready {
		if size < 0 {
			c.removeStray(c.readyPath(d))
			continue
		}
		if c.entries[d] == nil {
			e := &entry{rec: record{Digest: d, State: proto.CachePulling, SizeBytes: size}, verify: true}
			c.entries[d] = e
			changed = append(changed, e.rec)
		}
	}
	for d, size := range partials {
		e := c.entries[d]
		if size >= 0 && e != nil && e.rec.State == proto.CachePulling && !e.verify {
			e.progress.Store(size)
			continue
		}
		c.removeStray(c.partialPath(d))
	}
	if len(changed) > 0 {
		return c.idx.put(changed...)
	}
	return nil
}

// removeStray removes what has no business in the cache's directories; a failure is only
// logged, as the cache works around it.
func (c *Cache) removeStray(path string) {
	if err := removeFile(path); err != nil {
		c.cfg.Logger.Warn("cache: cannot remove a stray file", "path", path, "err", err)
	}
}

// listDigests maps each name in dir to its file's size: -1 for a name that is not a
// digest or not a regular file.
func listDigests(dir string) (map[string]int64, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read cache directory: %w", err)
	}
	out := make(map[string]int64, len(des))
	for _, de := range des {
		out[de.Name()] = -1
		if !proto.IsDigest(de.Name()) || !de.Type().IsRegular() {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			return nil, err
		}
		out[de.Name()] = fi.Size()
	}
	return out, nil
}
