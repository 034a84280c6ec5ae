// Package store is the registry's persistence: one bbolt file in the data directory,
// opened by one process, every transaction fsynced before it is acknowledged.
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
	"os"
	"path/filepath"
	"time"

	"github.com/better-compute/better-compute/proto"
	bolt "go.etcd.io/bbolt"
)

// FileName is the name of the store's file inside the data directory.
const FileName = "registry.db"

// schemaVersion is the first byte of every record.
const schemaVersion = 1

// ErrLocked is returned by Open when another process holds the store.
var ErrLocked = errors.New("the store is open in another process")

// Store is an open registry store.
type Store struct {
	db  *bolt.DB
	now func() time.Time
	// watch holds the hooks called after commits (watch.go, nodespecs.go).
	watch watchers
}

// Options tune Open. The zero value is fine.
type Options struct {
	// Now is the clock records are stamped with; time.Now when nil.
	Now func() time.Time
	// LockTimeout bounds the wait for another process to release the file (default 1s).
	LockTimeout time.Duration
}

// Open opens (or creates) the store in dataDir.
func Open(dataDir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	path := filepath.Join(dataDir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%s: %w (stop the other registry first)", path, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &Store{db: db, now: opts.Now}, nil
}

// Close releases the file.
func (s *Store) Close() error { return s.db.Close() }

// Update runs fn in a read-write transaction, committed (and fsynced) only when fn
// returns nil. Nothing fn wrote is kept when it fails.
func (s *Store) Update(fn func(*Tx) error) error {
	return s.db.Update(func(btx *bolt.Tx) error { return fn(&Tx{tx: btx, now: s.now(), store: s}) })
}

// Batch is Update for many concurrent small writers: calls from several goroutines are
// coalesced into one transaction and one fsync. fn may run more than once (when another
// call of the batch fails), so it must do the same thing each time; it returns only after
// its writes are committed.
func (s *Store) Batch(fn func(*Tx) error) error {
	return s.db.Batch(func(btx *bolt.Tx) error { return fn(&Tx{tx: btx, now: s.now(), store: s}) })
}

// View runs fn in a read-only transaction.
func (s *Store) View(fn func(*Tx) error) error {
	return s.db.View(func(btx *bolt.Tx) error { return fn(&Tx{tx: btx, now: s.now(), store: s}) })
}

// Tx is one transaction. Its methods are the only way records are read and written.
type Tx struct {
	tx    *bolt.Tx
	now   time.Time
	store *Store
	// scheduled are the OnWrite hooks this transaction already set to run on commit.
	scheduled map[*writeWatch]bool
}

// Now is the time the transaction began, as the store's clock tells it.
func (t *Tx) Now() time.Time { return t.now }

// get decodes the record at key into v and reports whether it was there.
func (t *Tx) get(bucket string, key []byte, v any) (bool, error) {
	b := t.tx.Bucket([]byte(bucket))
	if b == nil {
		return false, nil
	}
	raw := b.Get(key)
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
	rec, err := json.Marshal(v)
	if err != nil {
		return err
	}
	raw := append([]byte{schemaVersion}, rec...)
	b, err := t.tx.CreateBucketIfNotExists([]byte(bucket))
	if err != nil {
		return err
	}
	t.wrote(bucket)
	return b.Put(key, raw)
}

// putRaw writes an index entry (no schema byte) at key.
func (t *Tx) putRaw(bucket string, key, value []byte) error {
	b, err := t.tx.CreateBucketIfNotExists([]byte(bucket))
	if err != nil {
		return err
	}
	t.wrote(bucket)
	return b.Put(key, value)
}

// getRaw reads an index entry.
func (t *Tx) getRaw(bucket string, key []byte) []byte {
	b := t.tx.Bucket([]byte(bucket))
	if b == nil {
		return nil
	}
	return b.Get(key)
}

// del removes key; a missing key or bucket is not an error.
func (t *Tx) del(bucket string, key []byte) error {
	b := t.tx.Bucket([]byte(bucket))
	if b == nil {
		return nil
	}
	t.wrote(bucket)
	return b.Delete(key)
}

// notFound is the NOT_FOUND error for a missing object of the given kind.
func notFound(kind, id string) *proto.Error {
	return proto.Errorf(proto.NotFound, "%s %q not found", kind, id)
}
