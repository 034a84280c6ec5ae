package store

import (
	"bytes"
	"log/slog"
	"slices"
	"sync"

	"github.com/better-compute/better-compute/proto"
)

// Bucket names a kind of record whose writes OnWrite hooks learn of.
type Bucket string

// The buckets OnWrite watches. A write of a record's indexes always comes with a write
// of the record itself, so watching the record's bucket is enough.
const (
	BucketSites        Bucket = bucketSites
	BucketPools        Bucket = bucketPools
	BucketImages       Bucket = bucketImages
	BucketImageSigners Bucket = bucketImageSigners
)

// watchers are the hooks told about commits.
type watchers struct {
	mu       sync.Mutex
	nodeSpec []*func(node string, generation int64)
	writes   []*writeWatch
}

// writeWatch is an OnWrite hook and the buckets it watches.
type writeWatch struct {
	buckets []Bucket
	fn      func()
}

// OnWrite registers fn to be called after every commit that wrote (created, changed
// or deleted) a record of one of buckets, however the write was made (an API method,
// a workflow, a test), until the returned cancel is called. A read-only transaction,
// or a commit that wrote none of buckets, never calls it. fn runs on the committing
// goroutine after the store's locks are released, so it must return quickly (signal,
// do not work). On etcd it also runs after every commit of another replica that wrote
// one of buckets, on the store's watch goroutine: at least once, in commit order.
func (s *Store) OnWrite(fn func(), buckets ...Bucket) (cancel func()) {
	w := &writeWatch{buckets: slices.Clone(buckets), fn: fn}
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	s.watch.writes = append(s.watch.writes, w)
	return func() {
		s.watch.mu.Lock()
		defer s.watch.mu.Unlock()
		s.watch.writes = slices.DeleteFunc(s.watch.writes, func(o *writeWatch) bool { return o == w })
	}
}

// wrote schedules, once per transaction, the OnWrite hooks watching bucket for after
// the commit.
func (t *Tx) wrote(bucket string) {
	t.store.watch.mu.Lock()
	hooks := t.store.watch.writes
	t.store.watch.mu.Unlock()
	for _, w := range hooks {
		if t.scheduled[w] || !slices.Contains(w.buckets, Bucket(bucket)) {
			continue
		}
		if t.scheduled == nil {
			t.scheduled = map[*writeWatch]bool{}
		}
		t.scheduled[w] = true
		t.kv.onCommit(w.fn)
	}
}

// remoteCommit tells the hooks of a commit another replica made (etcd): the OnWrite
// hooks of the buckets it wrote, and the OnNodeSpec hooks of every NodeSpec it put.
// After lost events, every OnWrite hook runs and every NodeSpec is told again.
func (s *Store) remoteCommit(c remoteCommit) {
	s.watch.mu.Lock()
	writes, nodeSpec := s.watch.writes, s.watch.nodeSpec
	s.watch.mu.Unlock()
	for _, w := range writes {
		if c.lost || slices.ContainsFunc(w.buckets, func(b Bucket) bool { return slices.Contains(c.buckets, string(b)) }) {
			w.fn()
		}
	}
	if len(nodeSpec) == 0 {
		return
	}
	if c.lost {
		err := s.kv.view(func(tx kvTx) error {
			cur := tx.cursor(bucketNodeSpecs)
			for k, v := cur.First(); k != nil; k, v = cur.Next() {
				c.puts = append(c.puts, remotePut{bucket: bucketNodeSpecs, key: bytes.Clone(k), value: bytes.Clone(v)})
			}
			return nil
		})
		if err != nil {
			slog.Warn("store: after lost watch events, the NodeSpecs could not be read again", "err", err)
		}
	}
	for _, p := range c.puts {
		if p.bucket != bucketNodeSpecs {
			continue
		}
		var spec proto.NodeSpec
		if err := decode(p.bucket, p.key, p.value, &spec); err != nil {
			slog.Warn("store: a NodeSpec another replica wrote", "err", err)
			continue
		}
		for _, fn := range nodeSpec {
			(*fn)(spec.Node, spec.Generation)
		}
	}
}
