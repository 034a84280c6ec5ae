package registry

import (
	"log/slog"
	"maps"
	"net"
	"sync"
	"sync/atomic"

	"github.com/better-compute/better-compute/metricshttp"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/metrics"
	"github.com/better-compute/better-compute/registry/store"
)

// newMetrics makes the registry's collectors, reading the store and the agent plane at
// each scrape (the plane is started after them, and scraped only once it runs).
func newMetrics(st *store.Store, plane func() *agentPlane, log *slog.Logger) *metrics.Registry {
	nodes := newNodeCounts(st, func() (map[string]int, error) { return nodesByState(st) })
	return metrics.New(metrics.Sources{
		NodesByState: nodes.get,
		Sites: func() (n int, err error) {
			err = st.View(func(tx *store.Tx) error {
				return allPages(func(p store.Page) (string, error) {
					sites, next, err := tx.Sites(p)
					n += len(sites)
					return next, err
				})
			})
			return n, err
		},
		AgentSessions: func() map[string]int {
			out := map[string]int{}
			for role, n := range plane().ep.SessionsByRole() {
				out[string(role)] = n
			}
			return out
		},
		Handshakes: func() (full, resumed, refused int64) {
			h := plane().ep.Handshakes()
			return h.Accepted - h.Resumed, h.Resumed, h.Refused
		},
		RefusedAttempts: func() int64 { return plane().ep.Handshakes().RefusedAttempts },
		Pushes: func() (pushed, acked, failed int64) {
			p := plane().ep.Pushes()
			return p.Pushed, p.Acked, p.Failed
		},
		PushReadFailures: func() int64 { return plane().ep.Pushes().ReadFailures },
		Replacements: func() (first, again int64) {
			r := plane().ep.Replacements()
			return r.First, r.Again
		},
		StoreTransactions: storeTransactions(st),
		Log:               log,
	})
}

// storeTransactions reads st's transactions, conflicts and barrier rounds on etcd; nil
// on bbolt, whose writers never conflict and which takes no barrier.
func storeTransactions(st *store.Store) func() metrics.StoreCounts {
	if _, onEtcd := st.TxStats(); !onEtcd {
		return nil
	}
	return func() metrics.StoreCounts {
		s, _ := st.TxStats()
		out := metrics.StoreCounts{Commits: s.Commits, BarrierRounds: s.BarrierRounds, Conflicts: make(map[metrics.StoreConflict]int64, len(s.Conflicts))}
		for c, n := range s.Conflicts {
			out.Conflicts[metrics.StoreConflict{Bucket: c.Bucket, Kind: c.Kind}] = n
		}
		return out
	}
}

// nodeCounts is every tenant's nodes counted by state, counted again only after a
// commit wrote a node: the store's OnWrite hook on its nodes marks the count stale, on
// etcd for the commits of every registry sharing the store too. A scrape of a fleet whose
// nodes did not change since the last one reads nothing.
type nodeCounts struct {
	count func() (map[string]int, error)
	stale atomic.Bool
	mu    sync.Mutex
	last  map[string]int
}

// newNodeCounts counts with count, hooked to st's node writes for the store's life.
func newNodeCounts(st *store.Store, count func() (map[string]int, error)) *nodeCounts {
	c := &nodeCounts{count: count}
	c.stale.Store(true)
	st.OnWrite(func() { c.stale.Store(true) }, store.BucketNodes)
	return c
}

// get is the count, counted again when a node was written since the last. The mark is
// cleared before counting: a write that commits after the count's read marks it again.
func (c *nodeCounts) get() (map[string]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stale.Swap(false) {
		counts, err := c.count()
		if err != nil {
			c.stale.Store(true)
			return nil, err
		}
		c.last = counts
	}
	return maps.Clone(c.last), nil
}

// nodesByState counts every tenant's nodes by state, every state of the lifecycle
// present (0 when no node is in it), so a series never vanishes as its last node moves.
func nodesByState(st *store.Store) (map[string]int, error) {
	out := map[string]int{}
	for _, s := range metal.States() {
		out[s] = 0
	}
	err := st.View(func(tx *store.Tx) error {
		var tenants []store.Tenant
		err := allPages(func(p store.Page) (string, error) {
			page, next, err := tx.Tenants(p)
			tenants = append(tenants, page...)
			return next, err
		})
		if err != nil {
			return err
		}
		for _, tn := range tenants {
			err := allPages(func(p store.Page) (string, error) {
				nodes, next, err := tx.Nodes(tn.ID, "", "", p)
				for _, n := range nodes {
					out[n.State]++
				}
				return next, err
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// allPages calls page with each page of a list until the last.
func allPages(page func(store.Page) (string, error)) error {
	p := store.Page{}
	for {
		next, err := page(p)
		if err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		p.Cursor = next
	}
}

// serveMetrics serves m at /metrics on addr until stop is called; "" serves none.
func serveMetrics(addr string, m *metrics.Registry, log *slog.Logger) (_ net.Addr, stop func(), _ error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	return metricshttp.Serve(addr, "--metrics-listen", m.Handler(), log)
}
