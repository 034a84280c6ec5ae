package cache

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
	bolt "go.etcd.io/bbolt"
)

// indexSchema versions the index's records.
const indexSchema = 1

var imagesBucket = []byte("images")

// record is one image in the index, keyed by digest.
type record struct {
	Digest string `json:"digest"`
	// Ref and Source are the desired-list item the last pull of the image (or its partial
	// file) is from.
	Ref    string `json:"ref,omitempty"`
	Source string `json:"source,omitempty"`
	// Sources are the sources whose bytes were pulled and hashed to Digest, sorted, at
	// most proto.MaxImageCacheSources: the pull that made the file ready and each check
	// of another source since. Only a file in sha256/ has them.
	Sources []string `json:"sources,omitempty"`
	// SizeBytes is the artifact's size: the catalog's while pulling, the file's once ready.
	SizeBytes int64                 `json:"sizeBytes"`
	State     proto.ImageCacheState `json:"state"`
	LastUsed  time.Time             `json:"lastUsed,omitzero"`
	// Error says why the last pull failed; FailedAt when. Reason and RefusedHost are what
	// the image's report says of it (proto.ImageCacheEntry's), when it has a word for it.
	Error       string    `json:"error,omitempty"`
	FailedAt    time.Time `json:"failedAt,omitzero"`
	Reason      string    `json:"reason,omitempty"`
	RefusedHost string    `json:"refusedHost,omitempty"`
	// Validator is the ETag or Last-Modified of the bytes in partial/, for If-Range.
	Validator string `json:"validator,omitempty"`
}

// check refuses a record that is not of the digest it is stored under, or in a state the
// cache does not know (an index.db damaged or written by hand): the cache names an
// image's files by its record's digest, and a record of "../../x" evicting had it remove
// a file outside its directory.
func (r record) check(key []byte) error {
	switch {
	case !proto.IsDigest(r.Digest) || r.Digest != string(key):
		return fmt.Errorf("its digest %q is not the digest it is stored under", r.Digest)
	case !slices.Contains(proto.ImageCacheStates, r.State):
		return fmt.Errorf("its state %q is none of %v", r.State, proto.ImageCacheStates)
	}
	return nil
}

type envelope struct {
	Schema int    `json:"schema"`
	Record record `json:"record"`
}

// index is the bbolt file DIR/index.db. Every write is one fsynced transaction.
type index struct{ db *bolt.DB }

func openIndex(dir string) (*index, error) {
	db, err := bolt.Open(filepath.Join(dir, "index.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("open cache index in %s (is another cache running on it?): %w", dir, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(imagesBucket)
		return err
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	// bbolt fsyncs the file, not a new file's name in dir, and Open made sha256/ and
	// partial/ in dir: a power loss that took their names would take every record and
	// every image the cache reported present.
	if err := fsutil.SyncDir(dir); err != nil {
		db.Close()
		return nil, fmt.Errorf("open cache index in %s: %w", dir, err)
	}
	return &index{db: db}, nil
}

func (x *index) close() error { return x.db.Close() }

func (x *index) all() ([]record, error) {
	var out []record
	err := x.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(imagesBucket).ForEach(func(k, v []byte) error {
			var e envelope
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("index record %s: %w", k, err)
			}
			if e.Schema != indexSchema {
				return fmt.Errorf("index record %s has schema %d, this cache reads %d", k, e.Schema, indexSchema)
			}
			if err := e.Record.check(k); err != nil {
				return fmt.Errorf("index record %q: %w", k, err)
			}
			out = append(out, e.Record)
			return nil
		})
	})
	return out, err
}

// put writes records in one transaction.
func (x *index) put(recs ...record) error {
	return x.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(imagesBucket)
		for _, r := range recs {
			v, err := json.Marshal(envelope{Schema: indexSchema, Record: r})
			if err != nil {
				return err
			}
			if err := b.Put([]byte(r.Digest), v); err != nil {
				return err
			}
		}
		return nil
	})
}

func (x *index) remove(digest string) error {
	return x.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(imagesBucket).Delete([]byte(digest))
	})
}
