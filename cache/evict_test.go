package cache

import (
	"os"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestEvictionOrder(t *testing.T) {
	t0 := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
	ready := func(d string, size int64, used time.Duration) candidate {
		c := candidate{Digest: d, SizeBytes: size, State: proto.CacheReady}
		if used > 0 {
			c.LastUsed = t0.Add(used)
		}
		return c
	}
	with := func(c candidate, f func(*candidate)) candidate { f(&c); return c }
	for name, tc := range map[string]struct {
		cands []candidate
		need  int64
		want  []string
	}{
		"least recently used first": {
			cands: []candidate{ready("a", 10, 3*time.Hour), ready("b", 10, time.Hour), ready("c", 10, 2*time.Hour)},
			need:  15,
			want:  []string{"b", "c"},
		},
		"never used before any used, ties by digest": {
			cands: []candidate{ready("a", 10, time.Hour), ready("z", 10, 0), ready("m", 10, 0)},
			need:  25,
			want:  []string{"m", "z", "a"},
		},
		"stops once enough is freed": {
			cands: []candidate{ready("a", 100, time.Hour), ready("b", 10, 2*time.Hour)},
			need:  50,
			want:  []string{"a"},
		},
		"in use and desired are never picked": {
			cands: []candidate{
				with(ready("reading", 10, 2*time.Minute), func(c *candidate) { c.InUse = true }),
				with(ready("wanted", 10, 3*time.Minute), func(c *candidate) { c.Desired = true }),
				ready("old", 10, time.Hour),
			},
			need: 10,
			want: []string{"old"},
		},
		"only ready images": {
			cands: []candidate{
				{Digest: "p", SizeBytes: 10, State: proto.CachePulling},
				{Digest: "f", SizeBytes: 10, State: proto.CacheFailed},
				{Digest: "e", SizeBytes: 10, State: proto.CacheEvicting},
				ready("r", 10, time.Hour),
			},
			need: 5,
			want: []string{"r"},
		},
		"nothing when all candidates cannot free enough": {
			cands: []candidate{ready("a", 10, time.Hour), with(ready("b", 100, 0), func(c *candidate) { c.InUse = true })},
			need:  50,
			want:  nil,
		},
		"nothing needed": {
			cands: []candidate{ready("a", 10, time.Hour)},
			need:  0,
			want:  nil,
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, evictionOrder(tc.cands, tc.need)); diff != "" {
				t.Errorf("eviction order (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEvictionUnderCapacity(t *testing.T) {
	src := newSource(t)
	clock := newFakeClock()
	cfg := src.config()
	cfg.Clock = clock
	const size = 256 << 10
	cfg.CapacityBytes = 2 * size
	h := start(t, cfg)
	old, reading, fresh := newArtifact(40, size), newArtifact(42, size), newArtifact(43, size)
	imgs := map[string]proto.CacheImage{}
	for _, a := range []artifact{old, reading, fresh} {
		imgs[a.digest] = image(a, src.add("/"+a.digest, a.data))
	}
	h.c.SetDesired([]proto.CacheImage{imgs[old.digest], imgs[reading.digest]})
	for _, a := range []artifact{old, reading} {
		h.waitState(a.digest, proto.CacheReady)
	}
	for _, a := range []artifact{old, reading} {
		clock.Advance(time.Minute)
		if resp := get(t, h, a.digest, nil); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", a.digest, resp.Status)
		}
	}
	// A ramdisk is reading `reading`, which is older than old.
	f := h.c.acquire(reading.digest, false, nil)
	h.c.mu.Lock()
	h.c.entries[reading.digest].rec.LastUsed = clock.Now().Add(-time.Hour)
	h.c.mu.Unlock()

	// Only fresh is desired now: neither of the two is, so both are candidates by LRU,
	// but reading is read: old goes.
	h.c.SetDesired([]proto.CacheImage{imgs[fresh.digest]})
	h.waitState(fresh.digest, proto.CacheReady)
	if _, ok := h.entry(old.digest); ok {
		t.Error("old is still in the cache")
	}
	if _, err := os.Stat(h.c.readyPath(old.digest)); !os.IsNotExist(err) {
		t.Errorf("old's file: %v, want it gone", err)
	}

	// Another image does not fit: reading is read, fresh is desired.
	more := newArtifact(44, size)
	imgs[more.digest] = image(more, src.add("/"+more.digest, more.data))
	h.c.SetDesired([]proto.CacheImage{imgs[fresh.digest], imgs[more.digest]})
	if e := h.waitState(more.digest, proto.CacheFailed); e.Reason != proto.ReasonCapacity || e.RefusedHost != "" {
		t.Errorf("the image that does not fit reports reason %q, host %q; want %q alone", e.Reason, e.RefusedHost, proto.ReasonCapacity)
	}
	for _, a := range []artifact{reading, fresh} {
		if e, _ := h.entry(a.digest); e.State != proto.CacheReady {
			t.Errorf("%s is %q, want ready", a.digest[:8], e.State)
		}
	}

	// The ramdisk finishes: reading is evicted and more is pulled.
	h.c.release(f)
	h.waitState(more.digest, proto.CacheReady)
	if _, ok := h.entry(reading.digest); ok {
		t.Error("reading is still in the cache")
	}
}
