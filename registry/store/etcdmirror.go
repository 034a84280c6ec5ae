package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/btree"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Each replica keeps every key under the prefix in memory, its mirror, fed by one etcd
// watch: transactions read the mirror, never etcd (docs/store.md, "The mirror").
//
// A read must still see every commit any replica acknowledged before it began. Every
// commit also writes the commit key (P/~commit), so the commit key's mod revision is the
// revision of the last commit under the prefix. Before a transaction reads, a barrier
// reads the commit key linearizably, and the transaction waits until the mirror has
// applied that revision. One barrier serves every transaction that began before it was
// sent: concurrent readers share its round of the cluster. Under load (the last round
// served more than one), a round first gathers the transactions the round before
// released, as a group commit does (gather).
const (
	// etcdCommitName is the commit key's name under the prefix: not a bucket.
	etcdCommitName = "~commit"
	// mirrorLoadPage is how many keys each read of a load takes.
	mirrorLoadPage = 1000
	// mirrorDegree is the mirror's B-tree degree.
	mirrorDegree = 32
)

// mirrorKV is one key of the mirror: its value and mod revision.
type mirrorKV struct {
	key   string
	value []byte
	mod   int64
}

func mirrorLess(a, b mirrorKV) bool { return a.key < b.key }

// mirrorSnap is the mirror as it was once every commit up to rev was applied. It never
// changes: transactions read it without locks, however long they take.
type mirrorSnap struct {
	tree *btree.BTreeG[mirrorKV]
	rev  int64
	// next is closed when a later snapshot is published.
	next chan struct{}
}

func (s *mirrorSnap) get(key string) (mirrorKV, bool) {
	return s.tree.Get(mirrorKV{key: key})
}

// firstIn is tree's first key at or after from and before end.
func firstIn(tree *btree.BTreeG[mirrorKV], from, end string) (kv mirrorKV, ok bool) {
	tree.AscendGreaterOrEqual(mirrorKV{key: from}, func(i mirrorKV) bool {
		kv, ok = i, i.key < end
		return false
	})
	return kv, ok
}

// lastIn is tree's last key before before and at or after start.
func lastIn(tree *btree.BTreeG[mirrorKV], start, before string) (kv mirrorKV, ok bool) {
	tree.DescendLessOrEqual(mirrorKV{key: before}, func(i mirrorKV) bool {
		if i.key == before {
			return true
		}
		kv, ok = i, i.key >= start
		return false
	})
	return kv, ok
}

// A cursor reads its snapshot ahead of its forward moves: one descent of the tree
// reads a run of consecutive keys, and the moves within the run find their keys in it,
// not from the tree's root again. The first run is readAheadFirst keys (a Seek read once
// pays for little more than its key), each run after it twice the one before, up to
// readAheadMost.
const (
	readAheadFirst = 2
	readAheadMost  = 64
)

// readAhead is a run of a snapshot's keys, kvs, read in order by one ascent of its tree
// from the key from: it holds every key of the snapshot from from to its last key and,
// when all, to the ascent's end (the cursor's bucket's end). A snapshot never changes,
// so a run stays true however the cursor moves; the transaction's writes are laid over
// what it answers, never put in it.
type readAhead struct {
	kvs  []mirrorKV
	from string
	all  bool
	// next is the index in kvs after the key last answered.
	next int
}

// covers says whether first can answer from: whether the run holds every key of the
// snapshot from from to the first key at or after it, or to the ascent's end.
func (a *readAhead) covers(from string) bool {
	if from < a.from {
		return false
	}
	return a.all || len(a.kvs) > 0 && from <= a.kvs[len(a.kvs)-1].key
}

// fill reads the run of snap's keys at or after from and before end: twice as many keys
// as the run before held, readAheadFirst the first time, at most readAheadMost.
func (a *readAhead) fill(snap *mirrorSnap, from, end string) {
	n := min(max(2*len(a.kvs), readAheadFirst), readAheadMost)
	if cap(a.kvs) < n {
		a.kvs = make([]mirrorKV, 0, n)
	}
	a.kvs, a.from, a.next = a.kvs[:0], from, 0
	snap.tree.AscendGreaterOrEqual(mirrorKV{key: from}, func(kv mirrorKV) bool {
		if kv.key >= end {
			return false
		}
		a.kvs = append(a.kvs, kv)
		return len(a.kvs) < n
	})
	a.all = len(a.kvs) < n
}

// after is the run's first key after key when key is the key it answered last (known):
// the next in the run, or none when the run reached the ascent's end. A cursor stepping
// on from the key it stands on is answered so, with no search.
func (a *readAhead) after(key string) (kv mirrorKV, ok, known bool) {
	switch {
	case a.next == 0 || a.kvs[a.next-1].key != key:
		return kv, false, false
	case a.next < len(a.kvs):
		a.next++
		return a.kvs[a.next-1], true, true
	}
	return kv, false, a.all
}

// first is the run's first key at or after from, which the run covers.
func (a *readAhead) first(from string) (mirrorKV, bool) {
	i, _ := slices.BinarySearchFunc(a.kvs, from, func(kv mirrorKV, key string) int { return strings.Compare(kv.key, key) })
	if i == len(a.kvs) {
		return mirrorKV{}, false
	}
	a.next = i + 1
	return a.kvs[i], true
}

// mirror is the replica's copy of the keys under the prefix.
type mirror struct {
	// tree is the watch goroutine's working copy; snapshots are clones of it.
	tree *btree.BTreeG[mirrorKV]
	snap atomic.Pointer[mirrorSnap]
	// closed is closed with the backend: waiting for a revision then fails.
	closed chan struct{}
}

func newMirror() *mirror {
	m := &mirror{tree: btree.NewG(mirrorDegree, mirrorLess), closed: make(chan struct{})}
	m.snap.Store(&mirrorSnap{tree: m.tree.Clone(), next: make(chan struct{})})
	return m
}

// publish makes the working copy, with every commit up to rev applied, the snapshot
// transactions read.
func (m *mirror) publish(rev int64) {
	old := m.snap.Load()
	m.snap.Store(&mirrorSnap{tree: m.tree.Clone(), rev: rev, next: make(chan struct{})})
	close(old.next)
}

// at waits, at most timeout, for a snapshot at rev or later.
func (m *mirror) at(rev int64, timeout time.Duration) (*mirrorSnap, error) {
	var expired <-chan time.Time
	for {
		s := m.snap.Load()
		if s.rev >= rev {
			return s, nil
		}
		if expired == nil {
			t := time.NewTimer(timeout)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-s.next:
		case <-expired:
			return nil, proto.Errorf(proto.Unavailable, "this replica's copy of the store did not catch up with revision %d within %s (its watch of the etcd cluster is behind or broken): nothing was read or written; try again", rev, timeout)
		case <-m.closed:
			return nil, errors.New("store: closed")
		}
	}
}

// apply puts one watch event into the working copy.
func (m *mirror) apply(ev *clientv3.Event) {
	if ev.Type == clientv3.EventTypeDelete {
		m.tree.Delete(mirrorKV{key: string(ev.Kv.Key)})
		return
	}
	m.tree.ReplaceOrInsert(mirrorKV{key: string(ev.Kv.Key), value: ev.Kv.Value, mod: ev.Kv.ModRevision})
}

// load reads every key under the prefix at one revision, the present one, into a tree of
// its own, and returns it with the revision.
func (b *etcdBackend) load() (*btree.BTreeG[mirrorKV], int64, error) {
	tree := btree.NewG(mirrorDegree, mirrorLess)
	from, end := b.prefix, clientv3.GetPrefixRangeEnd(b.prefix)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(mirrorLoadPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		ctx, cancel := b.rpc()
		resp, err := b.cli.Get(ctx, from, opts...)
		cancel()
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			tree.ReplaceOrInsert(mirrorKV{key: string(kv.Key), value: kv.Value, mod: kv.ModRevision})
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return tree, rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// barrier coalesces the linearizable reads of the commit key: one round at a time is in
// flight, and every transaction that arrives meanwhile waits for the next.
type barrier struct {
	mu      sync.Mutex
	next    *barrierRound
	running bool
	// rounds counts the rounds sent since the store opened (TxStats).
	rounds int64
	// gather is the wait under load for the transactions a round released.
	gather gather
}

type barrierRound struct {
	done chan struct{}
	// waiters is how many transactions wait for the round.
	waiters int
	// rev is the revision of the last commit under the prefix when the round was read.
	rev int64
	err error
}

// snapshot returns a snapshot of the mirror holding every commit acknowledged before it
// was called, by any replica.
func (b *etcdBackend) snapshot() (*mirrorSnap, error) {
	rev, err := b.fresh()
	if err != nil {
		return nil, err
	}
	return b.mirror.at(rev, b.timeout)
}

// fresh is the revision of the last commit under the prefix, read by a barrier round
// sent after it was called: a snapshot at it or later holds every commit acknowledged
// before.
func (b *etcdBackend) fresh() (int64, error) {
	b.barrier.mu.Lock()
	r := b.barrier.next
	if r == nil {
		r = &barrierRound{done: make(chan struct{})}
		b.barrier.next = r
	}
	r.waiters++
	b.barrier.gather.arrived(r.waiters)
	if !b.barrier.running {
		b.barrier.running = true
		go b.runBarriers()
	}
	b.barrier.mu.Unlock()
	<-r.done
	return r.rev, r.err
}

// runBarriers reads the commit key for each round of waiting transactions, until none
// waits; under load each round first gathers the transactions the round before it
// released (gather).
func (b *etcdBackend) runBarriers() {
	for served := 0; ; {
		b.barrier.mu.Lock()
		b.barrier.gather.wait(&b.barrier.mu, served, b.ctx.Done())
		r := b.barrier.next
		b.barrier.next = nil
		if r == nil {
			b.barrier.running = false
			b.barrier.mu.Unlock()
			return
		}
		b.barrier.rounds++
		b.barrier.mu.Unlock()
		served = r.waiters
		ctx, cancel := b.rpc()
		resp, err := b.cli.Get(ctx, b.commitKey())
		cancel()
		switch {
		case err != nil:
			r.err = proto.Errorf(proto.Unavailable, "the store's etcd cluster did not answer a read (%v): nothing was read or written; try again once a majority of its members answer", err)
		case len(resp.Kvs) == 1:
			r.rev = resp.Kvs[0].ModRevision
		}
		b.barrier.mu.Lock()
		waiting := 0
		if b.barrier.next != nil {
			waiting = b.barrier.next.waiters
		}
		b.barrier.gather.releasing(waiting)
		b.barrier.mu.Unlock()
		close(r.done)
	}
}

func (b *etcdBackend) commitKey() string { return b.prefix + etcdCommitName }

// startWatch keeps the mirror current from the revision it was loaded at, and calls fn,
// on a goroutine of its own, with every commit of other replicas in commit order, until
// close. When the watch breaks it resumes after the last revision applied; when it fell
// behind a compaction, the mirror is loaded again and fn told that events were lost,
// with what was loaded to read the records of.
func (b *etcdBackend) startWatch(fn func(remoteCommit)) {
	hooks := newCommitQueue()
	b.watching.Add(2)
	go func() {
		defer b.watching.Done()
		hooks.run(b.ctx, fn)
	}()
	go func() {
		defer b.watching.Done()
		next := b.mirror.snap.Load().rev + 1
		for b.ctx.Err() == nil {
			ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(b.ctx))
			for resp := range b.cli.Watch(ctx, b.prefix, clientv3.WithPrefix(), clientv3.WithRev(next)) {
				if resp.CompactRevision != 0 {
					if tree, rev, err := b.load(); err == nil {
						b.mirror.tree = tree
						b.mirror.publish(rev)
						if snap := b.mirror.snap.Load(); b.readable(snap) == nil {
							hooks.push(remoteCommit{lost: true, loaded: b.txOn(snap, true)})
						}
						next = rev + 1
					}
					break
				}
				if resp.Err() != nil {
					break
				}
				next = b.handleEvents(resp.Events, next, hooks.push)
			}
			cancel()
			select {
			case <-b.ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// handleEvents applies events to the mirror and publishes it, hands fn the commits of
// other replicas among them, and those of this replica still waiting for their answer or
// whose answer was lost (etcdflights.go), grouped by revision (none once the mirror holds
// a format this release cannot read), and returns the revision to watch from next. etcd
// never splits one revision's events over two watch responses.
func (b *etcdBackend) handleEvents(events []*clientv3.Event, next int64, fn func(remoteCommit)) int64 {
	if len(events) == 0 {
		return next
	}
	var commits []remoteCommit
	for len(events) > 0 {
		rev := events[0].Kv.ModRevision
		n := 1
		for n < len(events) && events[n].Kv.ModRevision == rev {
			n++
		}
		for _, ev := range events[:n] {
			b.mirror.apply(ev)
		}
		switch c, own, num := b.decodeCommit(events[:n]); {
		case !own:
			commits = append(commits, c)
		case num != 0:
			// This replica's: told only when its answer was lost.
			if c.own = b.flights.seen(num); c.own != nil {
				commits = append(commits, c)
			}
		}
		events, next = events[n:], rev+1
	}
	b.mirror.publish(next - 1)
	if b.readable(b.mirror.snap.Load()) != nil {
		// Another replica raised the format: the store is outdated, and the commits of a
		// newer release are not told (this release may misread what they put).
		return next
	}
	for _, c := range commits {
		fn(c)
	}
	return next
}

// commitQueue hands commits from the watch to the hooks on a goroutine of their own, so
// a hook that reads the store (which waits for the mirror the watch feeds) cannot stall
// the watch.
type commitQueue struct {
	mu      sync.Mutex
	pending []remoteCommit
	wake    chan struct{}
}

func newCommitQueue() *commitQueue { return &commitQueue{wake: make(chan struct{}, 1)} }

func (q *commitQueue) push(c remoteCommit) {
	q.mu.Lock()
	q.pending = append(q.pending, c)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run calls fn with each commit pushed, in order, until ctx ends: one of this replica's
// once its answer was lost, none whose answer came (its caller ran its hooks).
func (q *commitQueue) run(ctx context.Context, fn func(remoteCommit)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		q.mu.Lock()
		batch := q.pending
		q.pending = nil
		q.mu.Unlock()
		for _, c := range batch {
			if c.own == nil || c.own.answerLost(ctx) {
				fn(c)
			}
		}
	}
}
