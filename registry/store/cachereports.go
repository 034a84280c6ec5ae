package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/sectionpack"
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

// MaxCacheReportData bounds the stored form of a report's entries (CacheReportSize) that
// image.RecordSiteCacheReport makes of a cut report and the agent's last one: what an
// `images` section's stored form may take (sectionpack.MaxData), so that the record of a
// report is no larger than the record of a section the store took, and fits one etcd
// transaction of the defaults with the site's location writes beside it.
const MaxCacheReportData = sectionpack.MaxData

// cacheReportRecord is a SiteCacheReport as stored: its entries in sectionpack's stored
// form, their JSON as it is under "images" (the form of every record before, which
// reads as it did) or compressed under "zstd" when that is smaller.
type cacheReportRecord struct {
	Site       string          `json:"siteId"`
	AgentID    string          `json:"agentId"`
	Images     json.RawMessage `json:"images,omitempty"`
	Zstd       []byte          `json:"zstd,omitempty"`
	ReportedAt time.Time       `json:"reportedAt"`
}

// byDigest is a copy of entries ordered by digest, the order a report is stored in.
func byDigest(entries []proto.ImageCacheEntry) []proto.ImageCacheEntry {
	entries = slices.Clone(entries)
	slices.SortFunc(entries, func(a, b proto.ImageCacheEntry) int { return strings.Compare(a.Digest, b.Digest) })
	return entries
}

// packEntries is entries' stored form: their JSON, ordered by digest, packed.
func packEntries(entries []proto.ImageCacheEntry) (sectionpack.Packed, error) {
	data, err := proto.Marshal(byDigest(entries))
	if err != nil {
		return sectionpack.Packed{}, err
	}
	return sectionpack.Pack(data), nil
}

// CacheReportSize is the bytes entries take stored in a report's record
// (sectionpack.Packed.Size of their JSON in digest order), which MaxCacheReportData
// bounds.
func CacheReportSize(entries []proto.ImageCacheEntry) (int, error) {
	p, err := packEntries(entries)
	return p.Size(), err
}

// record is r as stored, its entries (in digest order, as PutSiteCacheReport sorts
// them) packed. Entries whose JSON passes a frame, what a
// stored form decompresses to at most (sectionpack.Unpack), are INVALID_INPUT at images:
// stored compressed, they would not read back, and every read of the site's reports,
// its next report's write included, would fail.
func (r SiteCacheReport) record() (cacheReportRecord, error) {
	data, err := proto.Marshal(r.Images)
	if err != nil {
		return cacheReportRecord{}, err
	}
	if len(data) > proto.MaxFrame {
		return cacheReportRecord{}, proto.Errorf(proto.InvalidInput, "the cache report of agent %s takes %d bytes of JSON, more than the %d of a frame",
			r.AgentID, len(data), proto.MaxFrame).WithPath("images")
	}
	p := sectionpack.Pack(data)
	return cacheReportRecord{Site: r.Site, AgentID: r.AgentID, Images: p.Data, Zstd: p.Zstd, ReportedAt: r.ReportedAt}, nil
}

// report is the record as the store's readers see it, its entries unpacked.
func (rec cacheReportRecord) report() (SiteCacheReport, error) {
	r := SiteCacheReport{Site: rec.Site, AgentID: rec.AgentID, ReportedAt: rec.ReportedAt}
	data, err := sectionpack.Unpack(sectionpack.Packed{Data: rec.Images, Zstd: rec.Zstd})
	if err == nil && data != nil {
		err = json.Unmarshal(data, &r.Images)
	}
	if err != nil {
		return r, fmt.Errorf("store: the cache report of agent %s at site %s does not read: %w", rec.AgentID, rec.Site, err)
	}
	return r, nil
}

// siteCacheReport reads one stored report; false when there is none.
func (t *Tx) siteCacheReport(site, agentID string) (SiteCacheReport, bool, error) {
	var rec cacheReportRecord
	found, err := t.get(bucketSiteCacheReports, reportKey(site, agentID), &rec)
	if err != nil || !found {
		return SiteCacheReport{}, false, err
	}
	r, err := rec.report()
	return r, err == nil, err
}

func reportKey(site, agentID string) []byte { return []byte(site + "\x00" + agentID) }

// PutSiteCacheReport keeps an agent's report of an existing site, in place of its last,
// and reports whether its entries differ from the last one's. Its entries are stored
// in sectionpack's form, compressed when that is smaller, as an `images` section is:
// as JSON, those of a section at its budget took more than one etcd transaction.
func (t *Tx) PutSiteCacheReport(r SiteCacheReport) (changed bool, err error) {
	if _, err := t.Site(r.Site); err != nil {
		return false, err
	}
	r.Images = byDigest(r.Images)
	r.ReportedAt = t.now
	old, found, err := t.siteCacheReport(r.Site, r.AgentID)
	if err != nil {
		return false, err
	}
	rec, err := r.record()
	if err != nil {
		return false, err
	}
	changed = !found || !sameEntries(old.Images, r.Images)
	return changed, t.put(bucketSiteCacheReports, reportKey(r.Site, r.AgentID), rec)
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
		var rec cacheReportRecord
		if err := decode(bucketSiteCacheReports, k, v, &rec); err != nil {
			return nil, err
		}
		r, err := rec.report()
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
