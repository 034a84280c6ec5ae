package store

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/google/go-cmp/cmp"
)

// TestCopyToEtcd copies a bbolt store filled through its write paths into an empty etcd
// prefix: every record reads back equal and the copy passes Check; a second copy into
// the same prefix is refused; a record changed in the copy is reported.
func TestCopyToEtcd(t *testing.T) {
	src, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	fillForCheck(t, src)
	cfg := EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}
	dst, err := OpenEtcd(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	counts := map[string]map[string]int{CopyCopied: {}, CopyReadBack: {}}
	var phases []string
	stats, err := src.CopyTo(dst, func(phase, bucket string, n int) {
		counts[phase][bucket] = n
		if len(phases) == 0 || phases[len(phases)-1] != phase {
			phases = append(phases, phase)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := counts[CopyCopied]
	if stats.Records < 10 || stats.Buckets != len(seen) || stats.Buckets < 5 {
		t.Fatalf("copied %+v, progress for %v", stats, seen)
	}
	// The read-back tells of each bucket as it is compared, after the copy, as the copy
	// told of it.
	if diff := cmp.Diff(seen, counts[CopyReadBack]); diff != "" || strings.Join(phases, ",") != CopyCopied+","+CopyReadBack {
		t.Errorf("read back (-copied +read back):\n%s\nphases %q", diff, phases)
	}
	if err := dst.Check(); err != nil {
		t.Fatalf("the copy: %v", err)
	}
	dst.View(func(tx *Tx) error {
		if _, err := tx.Tenant("acme"); err != nil {
			t.Errorf("acme in the copy: %v", err)
		}
		if k, _ := tx.kv.cursor(bucketNodesByBMC).First(); !strings.HasPrefix(string(k), "rack-a\x0010.20.0.5\x00nd_") {
			t.Errorf("the copy does not index the node's BMC")
		}
		return nil
	})
	if _, err := src.CopyTo(dst, nil); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("copy into a prefix holding records: got %v, want ErrNotEmpty", err)
	}
	if err := dst.Update(func(tx *Tx) error { return tx.putRaw(bucketSites, []byte("rack-a"), []byte("\x01{}")) }); err != nil {
		t.Fatal(err)
	}
	if err := src.compare(dst, stats, nil); err == nil || !strings.Contains(err.Error(), `sites/"rack-a" differs`) {
		t.Fatalf("a changed record: got %v, want it reported", err)
	}
}

// TestCopyLargeRecordsToEtcd copies records of half a MiB and of 1 MiB, one after the
// other in one bucket, into a prefix of a cluster of etcd's defaults: each copying
// transaction stays within copyChunkBytes, or holds one record alone. Before, the second
// record joined the chunk of the first, a request of 1.5 MiB the cluster refused.
func TestCopyLargeRecordsToEtcd(t *testing.T) {
	src, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	doc := func(n int) json.RawMessage {
		return json.RawMessage(`{"pad":"` + strings.Repeat("a", n-len(`{"pad":""}`)) + `"}`)
	}
	mustUpdate(t, src, func(tx *Tx) error {
		for v, n := range map[int]int{1: copyChunkBytes / 2, 2: 1 << 20} {
			if _, err := tx.CreateProfile(ProfileRecord{Tenant: "acme", ID: "large", Version: v, Document: doc(n)}); err != nil {
				return err
			}
		}
		// Version 1 grown to a key and record one byte short of copyChunkBytes.
		key := profileKey("acme", "large", 1)
		grown := doc(copyChunkBytes - 1 - len(key) - (len(tx.getRaw(bucketProfiles, key)) - copyChunkBytes/2))
		_, err := tx.ReplaceProfileDocument("acme", "large", 1, 0, grown)
		if got := len(key) + len(tx.getRaw(bucketProfiles, key)); got != copyChunkBytes-1 {
			t.Fatalf("version 1 takes %d bytes, want %d", got, copyChunkBytes-1)
		}
		return err
	})
	dst, err := OpenEtcd(EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t), CheckLimits: true}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if _, err := src.CopyTo(dst, nil); err != nil {
		t.Fatalf("copying records of half a MiB and 1 MiB: %v", err)
	}
}
