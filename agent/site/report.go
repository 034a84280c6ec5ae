package site

import (
	"bytes"
	"encoding/json"
	"maps"
	"sync"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/sectionpack"
)

// The byte budget of each inventory section a site agent reports. A section over its
// budget is cut to it: its first entries, in the order the section keeps them, up to
// the budget, and the number left out goes in the `site` section's omitted. With the
// `site` section and the hello's other fields the sum stays well under proto.MaxFrame,
// so every hello and every report fits its frame whatever the site holds. A section is
// cut further when its stored form would not fit what the registry stores of one
// (sectionpack.Fits): its entries were as good as random and did not compress.
const (
	imagesBudget      = 1536 << 10
	bootEntriesBudget = 1 << 20
	// discoveriesBudget holds maxDiscoveries of any size DHCP lets a machine send.
	discoveriesBudget = 512 << 10
)

// cut is the JSON array of list's first entries whose encoding fits budget bytes and
// whose stored form fits the registry's bound on a section (sectionpack.MaxData), and how
// many entries it leaves out. The registry refuses a section over its bound and keeps the
// copy it stored before, which would leave every entry reported since unknown to it: so
// when the entries within budget do not fit, cut searches for the longest leading run
// that does (fitting). It packs the section once when it fits, a few times more when it
// does not; a site cuts each section once per change of it, not per hello.
func cut[T any](list []T, budget int) (json.RawMessage, int) {
	out := []byte{'['}
	var ends []int // ends[i] is the length of out with list[i], its comma included
	for i, e := range list {
		b, _ := proto.Marshal(e)
		if i > 0 {
			b = append([]byte{','}, b...)
		}
		if len(out)+len(b)+1 > budget { // and the closing bracket
			break
		}
		out = append(out, b...)
		ends = append(ends, len(out))
	}
	first := func(n int) json.RawMessage { // the array of list's first n entries
		end := 1
		if n > 0 {
			end = ends[n-1]
		}
		return append(out[:end:end], ']')
	}
	n := len(ends)
	if size := sectionpack.Pack(first(n)).Size(); size > sectionpack.MaxData {
		n = fitting(n, size, func(n int) int { return sectionpack.Pack(first(n)).Size() })
	}
	return first(n), len(list) - n
}

// fitting is the largest count of leading entries whose stored size (size) is within
// sectionpack.MaxData, given that over entries take overSize, more than it, and that no
// entry at all fits. A section's stored size grows about in proportion to its entries, so
// the first guesses interpolate between the largest count known to fit and the smallest
// known not to (the 32 images of a flooded section of 300 that fit are found in 3
// packings, where halving took 7); entries that pack unevenly are then bisected, at most
// interpolated guesses more than a bisection alone.
func fitting(over, overSize int, size func(n int) int) int {
	const interpolated = 3
	fits, fitsSize := 0, size(0)
	for guess := 0; over-fits > 1; guess++ {
		mid := (fits + over) / 2
		if guess < interpolated {
			mid = fits + int(int64(over-fits)*int64(sectionpack.MaxData-fitsSize)/int64(overSize-fitsSize))
			mid = min(max(mid, fits+1), over-1)
		}
		if s := size(mid); s <= sectionpack.MaxData {
			fits, fitsSize = mid, s
		} else {
			over, overSize = mid, s
		}
	}
	return fits
}

// reports sends the site agent's inventory sections, each cut to its budget, keeping
// the `site` section's omitted in line with them: a section that leaves more entries out
// than before is sent after the `site` section that counts them, and one that leaves
// fewer out (or none) before the `site` section that counts fewer, so that the registry
// never holds a section cut more than its `site` section says (it would drop the image
// locations a cut `images` section leaves out).
type reports struct {
	mu      sync.Mutex
	session *session.Agent
	info    proto.SiteInventory
	// sections are the sections as last cut, for the first hello.
	sections map[string]json.RawMessage
}

func newReports(info proto.SiteInventory) *reports {
	r := &reports{info: info, sections: map[string]json.RawMessage{}}
	r.sections[proto.SectionSite] = r.siteSection()
	return r
}

// siteSection is the `site` section now; r.mu is held (or r is not shared yet).
func (r *reports) siteSection() json.RawMessage {
	data, _ := proto.Marshal(r.info)
	return data
}

// set records a section cut from its entries (cut's answer) and sends it, before the
// `site` section when it leaves fewer entries out than before, after it when more. Before
// the session exists it only records it, for the first hello. A section as it was
// recorded (a cache report or a NodeSpec push that changed nothing in it) is not sent
// again: the registry holds it, and each copy sent, up to an agent frame, would take a
// place in the session's spacing of reports.
func (r *reports) set(section string, data json.RawMessage, omitted int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	was := r.info.Omitted[section]
	if omitted == was && bytes.Equal(r.sections[section], data) {
		return
	}
	r.sections[section] = data
	if omitted < was {
		r.send(section)
	}
	if omitted != was {
		r.info.Omitted = maps.Clone(r.info.Omitted)
		if r.info.Omitted == nil {
			r.info.Omitted = map[string]int{}
		}
		if omitted == 0 {
			delete(r.info.Omitted, section)
		} else {
			r.info.Omitted[section] = omitted
		}
		r.sections[proto.SectionSite] = r.siteSection()
		r.send(proto.SectionSite)
	}
	if omitted >= was {
		r.send(section)
	}
}

// setCache records the cache's capacity as reported (capacity) and as configured in the
// `site` section, and sends that section when either changed.
func (r *reports) setCache(capacity, configured int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.info.CacheCapacityBytes == capacity && r.info.CacheConfiguredCapacityBytes == configured {
		return
	}
	r.info.CacheCapacityBytes, r.info.CacheConfiguredCapacityBytes = capacity, configured
	r.sections[proto.SectionSite] = r.siteSection()
	r.send(proto.SectionSite)
}

// cacheCapacity is the cache's capacity as last reported (setCache): what the metrics
// show, read without touching the filesystem.
func (r *reports) cacheCapacity() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info.CacheCapacityBytes
}

// send sends section as recorded on the session, if there is one yet; r.mu is held.
func (r *reports) send(section string) {
	if r.session != nil {
		r.session.SetInventory(section, r.sections[section])
	}
}

// open makes the session with the sections as they are for its first hello (newSession
// gets them), and sends every later section on it.
func (r *reports) open(newSession func(hello map[string]json.RawMessage) (*session.Agent, error)) (*session.Agent, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := newSession(maps.Clone(r.sections))
	r.session = s
	return s, err
}
