package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry/store/etcdtest"
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
	var seen []string
	stats, err := src.CopyTo(dst, func(bucket string, _ int) { seen = append(seen, bucket) })
	if err != nil {
		t.Fatal(err)
	}
	if stats.Records < 10 || stats.Buckets != len(seen) || stats.Buckets < 5 {
		t.Fatalf("copied %+v, progress for %v", stats, seen)
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
	if err := src.compare(dst, stats); err == nil || !strings.Contains(err.Error(), `sites/"rack-a" differs`) {
		t.Fatalf("a changed record: got %v, want it reported", err)
	}
}
