package store

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// SiteCacheReport is the last report of one site agent about its image cache.
type SiteCacheReport struct {
	Site    string `json:"siteId"`
	AgentID string `json:"agentId"`
	// Images are the agent's cache entries, ordered by digest.
	Images     []proto.ImageCacheEntry `json:"images"`
	ReportedAt time.Time               `json:"reportedAt"`
}

const bucketSiteCacheReports = "site_cache_reports"

func reportKey(site, agentID string) []byte { return []byte(site + "\x00" + agentID) }

// PutSiteCacheReport keeps an agent's report of an existing site, in place of its last,
// and reports whether its entries differ from the last one's.
func (t *Tx) PutSiteCacheReport(r SiteCacheReport) (changed bool, err error) {
	if _, err := t.Site(r.Site); err != nil {
		return false, err
	}
	r.Images = slices.Clone(r.Images)
	slices.SortFunc(r.Images, func(a, b proto.ImageCacheEntry) int { return strings.Compare(a.Digest, b.Digest) })
	r.ReportedAt = t.now
	var old SiteCacheReport
	found, err := t.get(bucketSiteCacheReports, reportKey(r.Site, r.AgentID), &old)
	if err != nil {
		return false, err
	}
	changed = !found || !sameEntries(old.Images, r.Images)
	return changed, t.put(bucketSiteCacheReports, reportKey(r.Site, r.AgentID), r)
}

func sameEntries(a, b []proto.ImageCacheEntry) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// SiteCacheReports returns the last report of every agent of a site, by agent id.
func (t *Tx) SiteCacheReports(site string) ([]SiteCacheReport, error) {
	prefix := []byte(site + "\x00")
	var out []SiteCacheReport
	c := t.kv.cursor(bucketSiteCacheReports)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var r SiteCacheReport
		if err := decode(bucketSiteCacheReports, k, v, &r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
