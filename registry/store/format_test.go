package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// eachPlace runs fn as a subtest per backend with one new place (a directory, an etcd
// prefix) that open opens as often as asked: a store closed and opened again.
func eachPlace(t *testing.T, fn func(t *testing.T, open opener)) {
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) { fn(t, b.place(t)) })
	}
}

// setFormat writes raw as the store's format key through s, as a release of another
// format would (nil: deletes it, as in a store of the releases before the format).
func setFormat(t *testing.T, s *Store, raw []byte) {
	t.Helper()
	err := s.kv.update(func(tx kvTx) error {
		if raw == nil {
			return tx.del(bucketFormat, formatKey)
		}
		return tx.put(bucketFormat, formatKey, raw)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// storedFormat is the store's format key as s reads it.
func storedFormat(t *testing.T, s *Store) string {
	t.Helper()
	var raw string
	if err := s.kv.view(func(tx kvTx) error { raw = string(tx.get(bucketFormat, formatKey)); return nil }); err != nil {
		t.Fatal(err)
	}
	return raw
}

// raisedFrom has s, its records as a release of format left them, marked of that format,
// checks it read-only as it is (nothing to report), then opens it again, raising it, and
// checks the raised store: the store to look into.
func raisedFrom(t *testing.T, s *Store, open opener, now func() time.Time, format string) *Store {
	t.Helper()
	setFormat(t, s, []byte(format))
	s.Close()
	ro := mustOpen(t, open, Options{ReadOnly: true})
	if err := ro.Check(); err != nil {
		t.Errorf("Check of a store of format %s, not raised yet: %v", format, err)
	}
	ro.Close()
	s = mustOpen(t, open, Options{Now: now})
	if got := storedFormat(t, s); got != strconv.Itoa(Format) {
		t.Fatalf("format key %q after the open, want %d", got, Format)
	}
	mustCheck(t, s, "the raise")
	return s
}

func mustOpen(t *testing.T, open opener, opts Options) *Store {
	t.Helper()
	s, err := open(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestStoreOfANewerFormatIsRefused: a store whose format key says a newer release wrote
// it (or holds what no release writes) is refused at open, read-only too, with
// INVALID_CONFIG naming its format and the one this release reads and what to do, and
// is left as it is (refused again). Before, it opened, and this release read and wrote
// records it cannot read.
func TestStoreOfANewerFormatIsRefused(t *testing.T) {
	newer := strconv.Itoa(Format + 1)
	for _, c := range []struct{ name, raw, want string }{
		{"newer", newer, "the store is of format " + newer + ", written by a newer release of the registry, and this release reads formats up to " + strconv.Itoa(Format)},
		{"not a format", "+1", `the store's format key holds "+1", which no release of the registry writes`},
	} {
		t.Run(c.name, func(t *testing.T) {
			eachPlace(t, func(t *testing.T, open opener) {
				s := mustOpen(t, open, Options{})
				mustUpdate(t, s, func(tx *Tx) error { _, err := tx.CreateTenant("acme"); return err })
				setFormat(t, s, []byte(c.raw))
				s.Close()
				for range 2 {
					for _, readOnly := range []bool{false, true} {
						got, err := open(t, Options{ReadOnly: readOnly})
						if err == nil {
							got.Close()
							t.Fatalf("format key %q: the store opened (read-only %v), want it refused", c.raw, readOnly)
						}
						_, isFormat := errors.AsType[*FormatError](err)
						if proto.CodeOf(err) != proto.InvalidConfig || !isFormat || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "restore the backup") {
							t.Fatalf("format key %q (read-only %v): %v, want INVALID_CONFIG saying %q and what to do", c.raw, readOnly, err, c.want)
						}
					}
				}
			})
		})
	}
}

// TestStoreOfAnOlderFormatIsRaised: a store without a format key (written by a release
// before the format) opens read-only as it is, and opened is raised to Format, its
// records kept; opened again, nothing is written.
func TestStoreOfAnOlderFormatIsRaised(t *testing.T) {
	eachPlace(t, func(t *testing.T, open opener) {
		s := mustOpen(t, open, Options{})
		if got := storedFormat(t, s); got != strconv.Itoa(Format) {
			t.Fatalf("a new store's format key %q, want %d", got, Format)
		}
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.CreateTenant("acme"); return err })
		setFormat(t, s, nil)
		s.Close()

		ro := mustOpen(t, open, Options{ReadOnly: true})
		if got := storedFormat(t, ro); got != "" {
			t.Fatalf("a read-only open wrote the format key %q", got)
		}
		ro.Close()
		for i := range 2 {
			s := mustOpen(t, open, Options{})
			if got := storedFormat(t, s); got != strconv.Itoa(Format) {
				t.Fatalf("open %d: format key %q, want %d", i, got, Format)
			}
			if err := s.View(func(tx *Tx) error { _, err := tx.Tenant("acme"); return err }); err != nil {
				t.Fatalf("the tenant after the upgrade: %v", err)
			}
			if err := s.Check(); err != nil {
				t.Fatal(err)
			}
			if kv, ok := s.kv.(*etcdBackend); ok {
				if v := formatVersion(t, kv); v != 1 {
					t.Fatalf("open %d: the format key was written %d times since the upgrade, want once", i, v)
				}
			}
			s.Close()
		}
	})
}

// formatVersion is how often the format key was written since it was made (etcd's
// version of the key), 0 when it is missing.
func formatVersion(t *testing.T, b *etcdBackend) int64 {
	t.Helper()
	ctx, cancel := b.rpc()
	defer cancel()
	resp, err := b.cli.Get(ctx, b.recKey(bucketFormat, formatKey))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].Version
}

// TestEtcdReplicasRaiseTheFormatOnce: eight replicas open a store of format 0 at once:
// every one opens, and the format key is written once (each reads it and writes it in a
// transaction only when it is older).
func TestEtcdReplicasRaiseTheFormatOnce(t *testing.T) {
	cfg := EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}
	first := openReplicas(t, cfg, 1)[0]
	mustUpdate(t, first, func(tx *Tx) error { _, err := tx.CreateTenant("acme"); return err })
	setFormat(t, first, nil)
	for round := range 3 {
		var wg sync.WaitGroup
		stores := make([]*Store, 8)
		errs := make([]error, len(stores))
		start := make(chan struct{})
		for i := range stores {
			wg.Go(func() {
				<-start
				stores[i], errs[i] = OpenEtcd(cfg, Options{})
			})
		}
		close(start)
		wg.Wait()
		for i, s := range stores {
			if errs[i] != nil {
				t.Fatalf("round %d: replica %d: %v", round, i, errs[i])
			}
			if got := storedFormat(t, s); got != strconv.Itoa(Format) {
				t.Fatalf("round %d: replica %d reads format %q, want %d", round, i, got, Format)
			}
		}
		if v := formatVersion(t, first.kv.(*etcdBackend)); v != 1 {
			t.Fatalf("round %d: the format key was written %d times by replicas opening at once, want once", round, v)
		}
		for _, s := range stores {
			s.Close()
		}
		setFormat(t, first, nil)
	}
}

// TestEtcdReplicaStopsWhenTheFormatIsRaised: a replica running when another raises the
// store's format past Format is outdated (Outdated closed, OutdatedErr INVALID_CONFIG
// naming the format), then refuses every transaction, and a transaction that began
// before the raise and commits after it is refused, writing nothing. Before, the
// replica went on reading and writing a store it cannot read.
func TestEtcdReplicaStopsWhenTheFormatIsRaised(t *testing.T) {
	cluster := etcdtest.Shared(t)
	cfg := EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t)}
	rs := openReplicas(t, cfg, 2)
	old, newer := rs[0], rs[1]

	began, raised := make(chan struct{}), make(chan struct{})
	inFlight := make(chan error, 1)
	go func() {
		first := true
		inFlight <- old.Update(func(tx *Tx) error {
			if first {
				first = false
				close(began)
				<-raised
			}
			_, err := tx.CreateSite("rack-a")
			return err
		})
	}()
	<-began
	setFormat(t, newer, []byte(strconv.Itoa(Format+1)))
	close(raised)

	select {
	case <-old.Outdated():
	case <-time.After(30 * time.Second): // a guard against a hang, not a measure
		t.Fatal("the replica was not told that the format was raised")
	}
	want := "the store is of format " + strconv.Itoa(Format+1)
	if err := old.OutdatedErr(); proto.CodeOf(err) != proto.InvalidConfig || !strings.Contains(err.Error(), want) {
		t.Fatalf("OutdatedErr: %v, want INVALID_CONFIG saying %q", err, want)
	}
	if err := <-inFlight; proto.CodeOf(err) != proto.Unavailable || !strings.Contains(err.Error(), want) {
		t.Fatalf("a transaction begun before the raise: %v, want it refused UNAVAILABLE saying %q", err, want)
	}
	if err := old.Update(func(tx *Tx) error { _, err := tx.CreateSite("rack-b"); return err }); proto.CodeOf(err) != proto.Unavailable {
		t.Fatalf("a write after the raise: %v, want UNAVAILABLE", err)
	}
	if err := old.View(func(tx *Tx) error { return nil }); proto.CodeOf(err) != proto.Unavailable {
		t.Fatalf("a read after the raise: %v, want UNAVAILABLE", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := newer.kv.(*etcdBackend)
	if resp, err := b.cli.Get(ctx, b.prefix+bucketSites+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("sites stored after the raise: %v (%v), want none", resp, err)
	}
}

// FuzzParseFormat: a format key's value parses to a format that formatValue writes back
// as the same bytes, or to 0 when empty, or is refused as a FormatError holding it.
func FuzzParseFormat(f *testing.F) {
	for _, seed := range []string{"", "0", "1", "2", "01", "+1", "-1", " 1", "1\n", "99999999999999999999", "１"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		n, err := parseFormat(raw)
		switch fe, isFormat := errors.AsType[*FormatError](err); {
		case err != nil && (!isFormat || fe.Raw != string(raw)):
			t.Fatalf("%q: %v, want a FormatError holding it", raw, err)
		case err != nil:
		case len(raw) == 0 && n != 0:
			t.Fatalf("no format key parsed as %d", n)
		case len(raw) > 0 && (n < 1 || string(formatValue(n)) != string(raw)):
			t.Fatalf("%q parsed as %d, written back as %q", raw, n, formatValue(n))
		}
	})
}
