package cache

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/better-compute/better-compute/proto"
)

// indexWith is a cache directory (under a parent holding a file of its own, victim)
// whose index holds value at key.
func indexWith(t testing.TB, key, value []byte) (dir, victim string) {
	parent := t.TempDir()
	victim = filepath.Join(parent, "victim")
	if err := os.WriteFile(victim, []byte("not the cache's"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(parent, "cache")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, "index.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(imagesBucket)
		if err != nil || len(key) == 0 {
			return err
		}
		return b.Put(key, value)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir, victim
}

func indexRecord(t testing.TB, r record) []byte {
	v, err := json.Marshal(envelope{Schema: indexSchema, Record: r})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestIndexRecordOfNoDigestIsRefused: a record of the index whose digest is not the
// digest it is stored under (a damaged or edited index.db) is refused as the cache
// opens, naming it: the cache names its files by the record's digest, and an evicting
// record of "../../victim" had its file removed outside the cache's directory.
func TestIndexRecordOfNoDigestIsRefused(t *testing.T) {
	d := newArtifact(1, 1).digest
	for name, r := range map[string]record{
		"a path":         {Digest: "../../victim", State: proto.CacheEvicting},
		"another digest": {Digest: newArtifact(2, 1).digest, State: proto.CacheReady},
		"no state":       {Digest: d, State: "gone"},
	} {
		t.Run(name, func(t *testing.T) {
			dir, victim := indexWith(t, []byte(d), indexRecord(t, r))
			c, err := Open(Config{Dir: dir})
			if err == nil {
				c.Close()
			}
			if _, serr := os.Stat(victim); serr != nil {
				t.Fatalf("opening the cache over the record %+v removed a file outside it: %v", r, serr)
			}
			if err == nil {
				t.Fatalf("the record %+v under %s was read", r, d)
			}
		})
	}
}

// FuzzIndexRecord opens a cache whose index holds any value under any key: it opens
// only when the record is one of its key's digest in a known state, and then holds that
// image (or, evicting, none), and nothing outside its directory is touched.
func FuzzIndexRecord(f *testing.F) {
	d := newArtifact(1, 1).digest
	f.Add([]byte(d), indexRecord(f, record{Digest: d, State: proto.CacheReady, SizeBytes: 10, Sources: []string{"https://a/x"}}))
	f.Add([]byte(d), indexRecord(f, record{Digest: d, State: proto.CacheEvicting}))
	f.Add([]byte(d), indexRecord(f, record{Digest: "../../victim", State: proto.CacheEvicting}))
	f.Add([]byte(d), indexRecord(f, record{Digest: d, State: proto.CacheFailed, Source: "https://a/x", Reason: proto.ReasonSourceNotAllowed, RefusedHost: "a:443"}))
	f.Add([]byte("x"), []byte(`{"schema":2}`))
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		dir, victim := indexWith(t, key, value)
		c, err := Open(Config{Dir: dir})
		if _, serr := os.Stat(victim); serr != nil {
			t.Fatalf("opening over %q: %q removed a file outside the cache: %v", key, value, serr)
		}
		if err != nil {
			return
		}
		defer c.Close()
		var e envelope
		if len(key) == 0 {
			return
		}
		if json.Unmarshal(value, &e) != nil || e.Record.Digest != string(key) || !proto.IsDigest(e.Record.Digest) ||
			!slices.Contains(proto.ImageCacheStates, e.Record.State) {
			t.Fatalf("opened over %q: %q", key, value)
		}
		entries := c.Entries()
		if e.Record.State == proto.CacheEvicting {
			if len(entries) != 0 {
				t.Fatalf("an evicting record left %+v", entries)
			}
			return
		}
		if len(entries) != 1 || entries[0].Digest != string(key) || !slices.Contains(proto.ImageCacheStates, entries[0].State) {
			t.Fatalf("the record %q under %q holds %+v", value, key, entries)
		}
	})
}
