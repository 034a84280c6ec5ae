// Package store is the registry's persistence, over one of two backends: one bbolt file
// in the data directory (the default), opened by one process, every transaction fsynced
// before it is acknowledged; or an etcd cluster several registry replicas share
// (OpenEtcd, etcd.go). Both give the same serializable transactions.
//
// Records are JSON after a one-byte schema version. Buckets are made on
// first write, so each entity lives in its own file here with the invariants of its write
// path (a used profile version is never replaced, an unsigned image is never public, a
// token is consumed once): no caller can get around them.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// schemaVersion is the first byte of every record.
const schemaVersion = 1

// ErrLocked is returned by Open when another process holds the store.
var ErrLocked = errors.New("the store is open in another process")

// Transient reports whether err, a transaction's failure, may pass when the transaction
// runs again later, from what the store then holds: the etcd cluster did not answer, or
// did not confirm the commit (UNAVAILABLE), or the transaction met another replica's
// conflicting write every time it ran. A transaction the store refuses (too large for
// the cluster), or one that fails on what it read, fails the same way again.
func Transient(err error) bool {
	return proto.CodeOf(err) == proto.Unavailable || errors.Is(err, errConflicts)
}

// Store is an open registry store.
type Store struct {
	kv  backend
	now func() time.Time
	// watch holds the hooks called after commits (watch.go, nodespecs.go).
	watch watchers
	// outdated is closed when another replica raised the store's format past Format
	// (format.go).
	outdated *outdated
	// bounds bound what each tenant holds (tenantcounts.go).
	bounds TenantBounds
}

// Options tune Open and OpenEtcd. The zero value is fine.
type Options struct {
	// Now is the clock records are stamped with; time.Now when nil.
	Now func() time.Time
	// LockTimeout bounds the wait for another process to release the file (default 1s).
	LockTimeout time.Duration
	// ReadOnly opens the store to read it as it is, for Check: the bbolt file is opened
	// read-only (it must exist, and a registry holding it keeps it locked) and neither
	// backend brings its indexes up to its records at open, so what Check reports is
	// what the store holds.
	ReadOnly bool
	// Bounds bound the objects of each kind a tenant may hold; zero fields are the
	// defaults.
	Bounds TenantBounds
}

func (o *Options) defaults() {
	if o.LockTimeout == 0 {
		o.LockTimeout = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Bounds.defaults()
}

// Open opens (or creates) the bbolt store in dataDir.
func Open(dataDir string, opts Options) (*Store, error) {
	opts.defaults()
	kv, err := openBbolt(dataDir, opts.LockTimeout, opts.ReadOnly)
	if err != nil {
		return nil, err
	}
	return upgraded(&Store{kv: kv, now: opts.Now, outdated: newOutdated(), bounds: opts.Bounds}, opts)
}

// upgraded checks the format of s, just opened, and raises an older one to Format
// (openFormat), then brings its indexes and counts up to its records (reindexNodes, indexTPMs,
// countTenants), unless opts
// opened it read-only; it closes s when any of that fails.
func upgraded(s *Store, opts Options) (*Store, error) {
	if err := s.openFormat(opts.ReadOnly); err != nil {
		s.Close()
		return nil, err
	}
	if opts.ReadOnly {
		return s, nil
	}
	if err := s.reindexNodes(); err != nil {
		s.Close()
		return nil, fmt.Errorf("store: indexing the nodes: %w", err)
	}
	if err := s.indexTPMs(); err != nil {
		s.Close()
		return nil, fmt.Errorf("store: indexing the enrolled TPMs: %w", err)
	}
	if err := s.countTenants(); err != nil {
		s.Close()
		return nil, fmt.Errorf("store: counting each tenant's objects: %w", err)
	}
	return s, nil
}

// Close releases the file (bbolt) or the connection (etcd).
func (s *Store) Close() error { return s.kv.close() }

// Update runs fn in a read-write transaction, committed (and, on bbolt, fsynced) only
// when fn returns nil. Nothing fn wrote is kept when it fails. On etcd, fn runs again
// when another writer changed what it read before it committed, so it must do the same
// thing each time.
func (s *Store) Update(fn func(*Tx) error) error {
	return s.kv.update(func(kv kvTx) error { return fn(s.tx(kv)) })
}

// Batch is Update for many concurrent small writers: calls from several goroutines are
// coalesced into one transaction and one fsync. fn may run more than once (when another
// call of the batch fails), so it must do the same thing each time; it returns only after
// its writes are committed. On etcd too: a call that conflicts with another replica's
// write then runs alone, as Update.
func (s *Store) Batch(fn func(*Tx) error) error {
	return s.kv.batch(func(kv kvTx) error { return fn(s.tx(kv)) })
}

// View runs fn in a read-only transaction. On etcd it reads the replica's mirror of the
// store after a barrier, and sees every commit any replica acknowledged before it began
// (docs/store.md, "The mirror").
func (s *Store) View(fn func(*Tx) error) error {
	return s.kv.view(func(kv kvTx) error { return fn(s.tx(kv)) })
}

// Reader is one moment's reads: its Views see every commit acknowledged before the
// moment (Store.Reader), every commit this store made before the View (so a request
// reads what it wrote, and what woke it), and may see later ones. An API request takes
// one when it begins and reads and writes through it, so on etcd it pays one barrier,
// however many Views and Updates it makes: each of its reads is still at least as recent
// as the request.
type Reader struct {
	s     *Store
	floor int64
}

// Reader marks this moment for reads (on etcd: a barrier round, shared with the other
// transactions beginning at the same time).
func (s *Store) Reader() (Reader, error) {
	floor, err := s.kv.fresh()
	return Reader{s: s, floor: floor}, err
}

// View runs fn in a read-only transaction over a snapshot at least as recent as the
// Reader's moment.
func (r Reader) View(fn func(*Tx) error) error {
	return r.s.kv.viewAt(r.floor, func(kv kvTx) error { return fn(r.s.tx(kv)) })
}

// Update is Store.Update for a request that took the Reader: fn reads a snapshot at least
// as recent as the Reader's moment, and on etcd its transaction takes no barrier of its
// own (its commit compares what fn read).
func (r Reader) Update(fn func(*Tx) error) error {
	return r.s.kv.updateAt(r.floor, func(kv kvTx) error { return fn(r.s.tx(kv)) })
}

func (s *Store) tx(kv kvTx) *Tx { return &Tx{kv: kv, now: s.now(), store: s} }

// Tx is one transaction. Its methods are the only way records are read and written.
type Tx struct {
	kv    kvTx
	now   time.Time
	store *Store
	// scheduled are the OnWrite hooks this transaction already set to run on commit.
	scheduled map[*writeWatch]bool
	// endedRuns are the runs this transaction ended (UpdateRun), whose nodes' hooks are
	// told so (NodeChange).
	endedRuns []string
}

// Now is the time the transaction began, as the store's clock tells it.
func (t *Tx) Now() time.Time { return t.now }

// get decodes the record at key into v and reports whether it was there.
func (t *Tx) get(bucket string, key []byte, v any) (bool, error) {
	raw := t.kv.get(bucket, key)
	if raw == nil {
		return false, nil
	}
	return true, decode(bucket, key, raw, v)
}

func decode(bucket string, key, raw []byte, v any) error {
	if len(raw) == 0 || raw[0] != schemaVersion {
		return fmt.Errorf("store: %s/%s: a record of another schema than %d: this registry cannot read it", bucket, key, schemaVersion)
	}
	if err := json.Unmarshal(raw[1:], v); err != nil {
		return fmt.Errorf("store: %s/%s: %w", bucket, key, err)
	}
	return nil
}

// put writes v at key, making the bucket on first use.
func (t *Tx) put(bucket string, key []byte, v any) error {
	rec, err := encodeRecord(v)
	if err != nil {
		return err
	}
	t.wrote(bucket)
	return t.kv.put(bucket, key, rec)
}

// encodeRecord is v's record: the schema byte, then v's JSON with its text as it is
// (proto.Marshal): encoding/json's Marshal writes <, > and & in six bytes each, which
// would make the record of a profile document of 1 MiB, one of those characters over and
// over, six times larger than the document, and more than etcd takes in a request.
func encodeRecord(v any) ([]byte, error) {
	text, err := proto.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append([]byte{schemaVersion}, text...), nil
}

// putRaw writes an index entry (no schema byte) at key.
func (t *Tx) putRaw(bucket string, key, value []byte) error {
	t.wrote(bucket)
	return t.kv.put(bucket, key, value)
}

// getRaw reads an index entry.
func (t *Tx) getRaw(bucket string, key []byte) []byte {
	return t.kv.get(bucket, key)
}

// del removes key; a missing key or bucket is not an error.
func (t *Tx) del(bucket string, key []byte) error {
	t.wrote(bucket)
	return t.kv.del(bucket, key)
}

// notFound is the NOT_FOUND error for a missing object of the given kind, saying which
// command shows those there are (listedBy) when an operator names that kind.
func notFound(kind, id string) *proto.Error {
	if list, ok := listedBy[kind]; ok {
		return proto.Errorf(proto.NotFound, "%s %q not found: %s", kind, id, list)
	}
	return proto.Errorf(proto.NotFound, "%s %q not found", kind, id)
}

// listedBy is, for each kind of record an operator names on the command line, the
// command that shows those there are: the next step of its NOT_FOUND. It says the same of
// another tenant's record as of one that does not exist.
var listedBy = map[string]string{
	"credential": CredentialsListed,
	"image":      ImagesListed,
	"node":       NodesListed,
	"pool":       "`pools list` shows the tenant's pools",
	"profile":    "`profiles list` shows what this tenant can use",
	"secret":     "`secrets list` shows the tenant's secrets",
	"signer":     "`signers list` shows them",
	"site":       "`sites list` shows them",
	"tenant":     "`tenants list` shows them",
	"workflow":   WorkflowsListed,
}

// The next steps of a NOT_FOUND that the registry's packages also give of a record they
// refuse to show a caller (another tenant's): the same words whichever it is.
const (
	CredentialsListed = "`credentials list` shows the tenant's credentials"
	ImagesListed      = "`images list` shows the tenant's and the public images"
	NodesListed       = "`nodes list` shows the tenant's nodes"
	WorkflowsListed   = "`nodes events NODE` shows the workflows a node ran"
)
