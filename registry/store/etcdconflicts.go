package store

import (
	"maps"
	"sync"
)

// Conflict names what a transaction on etcd read that another replica's commit changed,
// so that it ran again: Kind "key" (a key it read by name), "range" (a key put inside a
// range a cursor of it read), "deleted" (a key deleted from a bucket a cursor of it
// walked), "bucket" (any write to a bucket it read, when its compares fell back to the
// buckets' generations) or "" when the change was not found again (the mirror moved
// on).
type Conflict struct {
	Bucket, Kind string
}

// conflicts counts the transactions committed and the conflicts met, by what caused
// them. Only a conflict costs the finding of its cause.
type conflicts struct {
	mu      sync.Mutex
	commits int64
	by      map[Conflict]int64
}

func (c *conflicts) committed() {
	c.mu.Lock()
	c.commits++
	c.mu.Unlock()
}

// count finds which of tx's compares failed, on a snapshot taken after its commit
// failed (so holding the write it met: a barrier, as the next run takes), and counts
// the first of them. The revision etcd answered the commit with will not do: it moves
// with writes outside the prefix too, which the mirror never applies.
func (c *conflicts) count(tx *etcdTx) {
	cause := Conflict{}
	if now, err := tx.b.snapshot(); err == nil {
		cause = tx.conflictOn(now)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[Conflict]int64{}
	}
	c.by[cause]++
}

// snapshot is the count of transactions committed and of the conflicts by cause.
func (c *conflicts) snapshot() (int64, map[Conflict]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commits, maps.Clone(c.by)
}

// conflictOn is the first compare of tx that does not hold on now.
func (t *etcdTx) conflictOn(now *mirrorSnap) Conflict {
	for full, rev := range t.reads {
		if kv, _ := now.get(full); kv.mod != rev {
			return Conflict{Bucket: t.bucketOf(full), Kind: "key"}
		}
	}
	ranges := t.ranges()
	for _, r := range ranges {
		if now.putSince(r.from, r.end, t.snap.rev) {
			return Conflict{Bucket: r.bucket, Kind: "range"}
		}
	}
	for _, r := range ranges {
		was, _ := t.snap.get(t.b.delKey(r.bucket))
		if kv, _ := now.get(t.b.delKey(r.bucket)); kv.mod != was.mod {
			return Conflict{Bucket: r.bucket, Kind: "deleted"}
		}
	}
	for _, r := range ranges {
		was, _ := t.snap.get(t.b.genKey(r.bucket))
		if kv, _ := now.get(t.b.genKey(r.bucket)); kv.mod != was.mod {
			return Conflict{Bucket: r.bucket, Kind: "bucket"}
		}
	}
	for full := range t.reads {
		bucket := t.bucketOf(full)
		was, _ := t.snap.get(t.b.genKey(bucket))
		if kv, _ := now.get(t.b.genKey(bucket)); kv.mod != was.mod {
			return Conflict{Bucket: bucket, Kind: "bucket"}
		}
	}
	return Conflict{}
}

// putSince says whether a key in [from, end) was put after rev.
func (s *mirrorSnap) putSince(from, end string, rev int64) (put bool) {
	s.tree.AscendRange(mirrorKV{key: from}, mirrorKV{key: end}, func(kv mirrorKV) bool {
		put = kv.mod > rev
		return !put
	})
	return put
}

// TxStats are the transactions a store on etcd committed since it opened, the
// conflicts that made them run again, by cause (docs/store.md, "Transactions"), and the
// barrier rounds it sent, each a linearizable read of the cluster that the transactions
// beginning meanwhile share (docs/store.md, "The mirror").
type TxStats struct {
	Commits       int64
	Conflicts     map[Conflict]int64
	BarrierRounds int64
}

// TxStats counts this replica's transactions and their conflicts; false on bbolt.
func (s *Store) TxStats() (TxStats, bool) {
	b, ok := s.kv.(*etcdBackend)
	if !ok {
		return TxStats{}, false
	}
	commits, by := b.conflicts.snapshot()
	b.barrier.mu.Lock()
	rounds := b.barrier.rounds
	b.barrier.mu.Unlock()
	return TxStats{Commits: commits, Conflicts: by, BarrierRounds: rounds}, true
}
