package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
)

// FileName is the name of the store's file inside the data directory.
const FileName = "registry.db"

// boltMapped is the file's size bbolt maps up front: address space, not memory. bbolt
// maps the file again when it outgrows what is mapped, and that waits for every open
// read, so a write that grows the file would wait behind a long read (a listing, a
// hello's reads). A registry's store of 10,000 nodes is a few MiB: at this size no write
// of a store under 1 GiB waits for a read.
const boltMapped = 1 << 30

// bboltBackend is one bbolt file: each bucket a top-level bbolt bucket, each key and
// value stored as they are.
type bboltBackend struct{ db *bolt.DB }

// openBbolt opens the store file in dataDir, making both when missing (unless readOnly).
// What it makes survives a power loss whoever opens the store (serve, `store copy`, a
// tool or a test): the directories are fsynced in their parents (fsutil.MkdirAll), and
// dataDir once the file is open, since bbolt fsyncs the file on each commit but never
// its name in the directory, and a power loss that lost the name would lose every
// commit in it.
func openBbolt(dataDir string, lockTimeout time.Duration, readOnly bool) (*bboltBackend, error) {
	path := filepath.Join(dataDir, FileName)
	if readOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("no store in %s: %w", dataDir, err)
		}
	} else if err := fsutil.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, InitialMmapSize: boltMapped, ReadOnly: readOnly})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, proto.Errorf(proto.InvalidState, "%s: %w: a running registry holds it; stop that registry first, or work on a copy of its data directory", path, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if !readOnly {
		if err := fsutil.SyncDir(dataDir); err != nil {
			db.Close()
			return nil, fmt.Errorf("sync the data directory %s: %w", dataDir, err)
		}
	}
	return &bboltBackend{db: db}, nil
}

func (b *bboltBackend) update(fn func(kvTx) error) error {
	return b.db.Update(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (b *bboltBackend) batch(fn func(kvTx) error) error {
	return b.db.Batch(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (b *bboltBackend) view(fn func(kvTx) error) error {
	return b.db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

// fresh has nothing to mark: one process writes the file, and every view sees every
// commit made before it began.
func (b *bboltBackend) fresh() (int64, error) { return 0, nil }

func (b *bboltBackend) viewAt(_ int64, fn func(kvTx) error) error { return b.view(fn) }

func (b *bboltBackend) updateAt(_ int64, fn func(kvTx) error) error { return b.update(fn) }

func (b *bboltBackend) check() []error {
	var errs []error
	err := b.db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			errs = append(errs, fmt.Errorf("store file: %w", err))
		}
		return nil
	})
	return append(errs, err)
}

func (b *bboltBackend) close() error { return b.db.Close() }

type boltTx struct{ tx *bolt.Tx }

func (t boltTx) get(bucket string, key []byte) []byte {
	b := t.tx.Bucket([]byte(bucket))
	if b == nil {
		return nil
	}
	return b.Get(key)
}

func (t boltTx) put(bucket string, key, value []byte) error {
	b, err := t.tx.CreateBucketIfNotExists([]byte(bucket))
	if err != nil {
		return err
	}
	return b.Put(key, value)
}

func (t boltTx) del(bucket string, key []byte) error {
	b := t.tx.Bucket([]byte(bucket))
	if b == nil {
		return nil
	}
	return b.Delete(key)
}

func (t boltTx) cursor(bucket string) cursor {
	b := t.tx.Bucket([]byte(bucket))
	if b == nil {
		return emptyCursor{}
	}
	return b.Cursor()
}

func (t boltTx) buckets() []string {
	var names []string
	t.tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		names = append(names, string(name))
		return nil
	})
	return names
}

func (t boltTx) onCommit(fn func()) { t.tx.OnCommit(fn) }
