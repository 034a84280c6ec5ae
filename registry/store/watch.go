package store

import (
	"bytes"
	"log/slog"
	"slices"
	"sync"
)

// Bucket names a kind of record whose writes OnWrite hooks learn of.
type Bucket string

// The buckets OnWrite watches. A write of a record's indexes always comes with a write
// of the record itself, so watching the record's bucket is enough.
const (
	BucketSites        Bucket = bucketSites
	BucketNodes        Bucket = bucketNodes
	BucketPools        Bucket = bucketPools
	BucketImages       Bucket = bucketImages
	BucketImageSigners Bucket = bucketImageSigners
	// BucketRuns are the workflow runs, BucketAgentStatus what each agent last applied,
	// BucketAgentJoins when each agent last joined, BucketAgentSessions each site agent's
	// last session: what waits for a run, an agent's generation, a rejoin or a site
	// agent's session watch, whichever replica wrote it.
	BucketRuns          Bucket = bucketRuns
	BucketAgentStatus   Bucket = bucketAgentStatus
	BucketAgentJoins    Bucket = bucketAgentJoins
	BucketAgentSessions Bucket = bucketAgentSessions
)

// watchers are the hooks told about commits. A commit reads a list of hooks under its
// mutex and tells them after releasing it, while hooks come and go (and a hook may cancel
// itself as it is told): a list is never changed in place once made, but replaced by a
// new one (withoutHook), so every list a commit read stays as it was.
type watchers struct {
	mu     sync.Mutex
	writes []*writeWatch
	// nodeSpec and agentCommand are told of each NodeSpec and relayed command written,
	// nodeIdentity of each node whose identity changed, siteMACs of each node whose
	// entries at its site changed (OnSiteMACs), siteIdentity of each site whose
	// agent's certificates were revoked, agentJoin and agentSession of each agent session
	// recorded as opened.
	nodeSpec     recordHooks[nodeSpecRecord]
	agentCommand recordHooks[AgentCommand]
	nodeIdentity recordHooks[NodeChange]
	siteMACs     recordHooks[Node]
	siteIdentity recordHooks[Site]
	agentJoin    recordHooks[AgentJoin]
	agentSession recordHooks[AgentSession]
}

// recordHooks are the hooks told of each record of one kind a commit put.
type recordHooks[T any] struct {
	mu  sync.Mutex
	fns []*func(T)
}

// add registers fn until the returned cancel is called.
func (h *recordHooks[T]) add(fn func(T)) (cancel func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fns = append(h.fns, &fn)
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.fns = withoutHook(h.fns, &fn)
	}
}

func (h *recordHooks[T]) list() []*func(T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fns
}

// afterCommit has the hooks told of rec once t commits.
func (h *recordHooks[T]) afterCommit(t *Tx, rec T) {
	for _, fn := range h.list() {
		t.kv.onCommit(func() { (*fn)(rec) })
	}
}

// tell decodes a record another replica put, completes it with what the record does not
// hold (complete, when set), and tells the hooks of it.
func (h *recordHooks[T]) tell(p remotePut, complete func(*T)) {
	fns := h.list()
	if len(fns) == 0 {
		return
	}
	var rec T
	if err := decode(p.bucket, p.key, p.value, &rec); err != nil {
		slog.Warn("store: a record another replica wrote", "err", err)
		return
	}
	if complete != nil {
		complete(&rec)
	}
	for _, fn := range fns {
		(*fn)(rec)
	}
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
		s.watch.writes = withoutHook(s.watch.writes, w)
	}
}

// withoutHook is a new list of the hooks but h. The list is not changed: a commit may be
// telling its hooks (watchers), and deleting in place would shift them under it,
// skipping one and leaving a nil one at the end.
func withoutHook[H comparable](hooks []H, h H) []H {
	return slices.DeleteFunc(slices.Clone(hooks), func(o H) bool { return o == h })
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
// hooks of the buckets it wrote, and the OnNodeIdentity, OnSiteIdentity, OnSessionOpened,
// OnNodeSpec and OnAgentCommand hooks of every node, site, agent join or session, NodeSpec
// and relayed command it put, in that order: a session ended for an identity or another
// replica's newer session is gone before a NodeSpec or command of the same commit
// looks for it. After lost events, every OnWrite hook runs and every stored record of
// those kinds is told again, as the watch loaded them (c.loaded; when none is given, as
// a View reads them). A node is told with whether the commit ended its workflow (its
// entry in the running runs' index deleted); after lost events, whether that index
// holds it no more.
func (s *Store) remoteCommit(c remoteCommit) {
	s.watch.mu.Lock()
	writes := s.watch.writes
	s.watch.mu.Unlock()
	for _, w := range writes {
		if c.lost || slices.ContainsFunc(w.buckets, func(b Bucket) bool { return slices.Contains(c.buckets, string(b)) }) {
			w.fn()
		}
	}
	ended := func(run string) bool { return slices.Contains(c.ended, run) }
	if c.lost {
		read := s.kv.view
		if c.loaded != nil {
			read = func(fn func(kvTx) error) error { return fn(c.loaded) }
		}
		running := map[string]bool{}
		ended = func(run string) bool { return run != "" && !running[run] }
		err := read(func(tx kvTx) error {
			for _, bucket := range recordHookBuckets {
				cur := tx.cursor(bucket)
				for k, v := cur.First(); k != nil; k, v = cur.Next() {
					c.puts = append(c.puts, remotePut{bucket: bucket, key: bytes.Clone(k), value: bytes.Clone(v)})
				}
			}
			cur := tx.cursor(bucketRunningRuns)
			for k, _ := cur.First(); k != nil; k, _ = cur.Next() {
				running[string(k)] = true
			}
			return nil
		})
		if err != nil {
			slog.Warn("store: after lost watch events, the NodeSpecs and commands could not be read again", "err", err)
		}
	}
	for _, bucket := range recordHookBuckets {
		for _, p := range c.puts {
			if p.bucket != bucket {
				continue
			}
			switch bucket {
			case bucketNodes:
				s.watch.nodeIdentity.tell(p, func(n *NodeChange) { n.WorkflowEnded = ended(n.Workflow) })
				s.watch.siteMACs.tell(p, nil)
			case bucketSites:
				s.watch.siteIdentity.tell(p, nil)
			case bucketAgentJoins:
				s.watch.agentJoin.tell(p, nil)
			case bucketAgentSessions:
				s.watch.agentSession.tell(p, nil)
			case bucketNodeSpecs:
				s.watch.nodeSpec.tell(p, nil)
			case bucketAgentCommands:
				s.watch.agentCommand.tell(p, nil)
			}
		}
	}
}

// recordHookBuckets are the buckets whose records another replica put are told to
// record hooks, in the order they are told.
var recordHookBuckets = []string{bucketNodes, bucketSites, bucketAgentJoins, bucketAgentSessions, bucketNodeSpecs, bucketAgentCommands}
