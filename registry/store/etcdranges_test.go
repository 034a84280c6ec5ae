package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// rangesBucket is the bucket the range tests scan; outBucket the one their transactions
// write, so that each commits with compares.
const rangesBucket, outBucket = "test_ranges", "test_out"

// runsAround runs scan in a transaction of a, and before its first run commits, write in
// a transaction of b (another replica); it returns how many times scan ran.
func runsAround(t *testing.T, a, b *Store, scan func(tx *Tx) error, write func(tx *Tx) error) int {
	t.Helper()
	runs := 0
	if err := a.Update(func(tx *Tx) error {
		runs++
		if err := scan(tx); err != nil {
			return err
		}
		if runs == 1 {
			if err := b.Update(write); err != nil {
				return err
			}
		}
		return tx.kv.put(outBucket, []byte("out"), []byte(fmt.Sprint(runs)))
	}); err != nil {
		t.Fatal(err)
	}
	return runs
}

// TestEtcdScanConflictsOnlyInsideItsRange: a cursor that read k20, k30 and k40 and
// stopped there (in its first run) read [k20, k40]: a key put inside that range, or deleted from the bucket,
// by another replica before its commit makes the transaction run again; a key put
// before or after it does not. Each case counts the runs, and the cause counted.
func TestEtcdScanConflictsOnlyInsideItsRange(t *testing.T) {
	for name, c := range map[string]struct {
		write func(tx *Tx) error
		runs  int
		cause string
	}{
		"insert inside":           {write: putKey("k25"), runs: 2, cause: "range"},
		"update inside":           {write: putKey("k30"), runs: 2, cause: "range"},
		"update of its last key":  {write: putKey("k40"), runs: 2, cause: "range"},
		"delete inside":           {write: delKey("k30"), runs: 2, cause: "deleted"},
		"delete of its first key": {write: delKey("k20"), runs: 2, cause: "deleted"},
		// A deletion leaves no key in the range to compare: the bucket's deletion
		// generation stands for every deletion from it, inside the range or not.
		"delete outside":                {write: delKey("k50"), runs: 2, cause: "deleted"},
		"insert before":                 {write: putKey("k15"), runs: 1},
		"insert after where it stopped": {write: putKey("k45"), runs: 1},
		"update after":                  {write: putKey("k50"), runs: 1},
		"update before":                 {write: putKey("k10"), runs: 1},
		"another bucket":                {write: func(tx *Tx) error { return tx.kv.put("test_other", []byte("k30"), []byte("x")) }, runs: 1},
	} {
		t.Run(name, func(t *testing.T) {
			stores := replicas(t, 2)
			if err := stores[0].Update(func(tx *Tx) error {
				for _, k := range []string{"k10", "k20", "k30", "k40", "k50"} {
					if err := tx.kv.put(rangesBucket, []byte(k), []byte("v")); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			scan := func(tx *Tx) error {
				cur := tx.kv.cursor(rangesBucket)
				cur.Seek([]byte("k20"))
				cur.Next()
				cur.Next()
				return nil
			}
			before, _ := stores[0].TxStats()
			if got := runsAround(t, stores[0], stores[1], scan, c.write); got != c.runs {
				t.Fatalf("the scan ran %d times, want %d", got, c.runs)
			}
			after, _ := stores[0].TxStats()
			if c.cause != "" {
				want := Conflict{Bucket: rangesBucket, Kind: c.cause}
				if n := after.Conflicts[want] - before.Conflicts[want]; n != 1 {
					t.Errorf("conflicts counted %v, want one %+v", after.Conflicts, want)
				}
			}
		})
	}
}

func putKey(k string) func(tx *Tx) error {
	return func(tx *Tx) error { return tx.kv.put(rangesBucket, []byte(k), []byte("new")) }
}

func delKey(k string) func(tx *Tx) error {
	return func(tx *Tx) error { return tx.kv.del(rangesBucket, []byte(k)) }
}

// TestEtcdPageConflictsBeforeItsEnd: a page of two tenants read the first two and the
// third (to know there is more): a tenant made by another replica before that point makes
// the transaction run again, one made past it does not.
func TestEtcdPageConflictsBeforeItsEnd(t *testing.T) {
	for name, c := range map[string]struct {
		tenant string
		runs   int
	}{
		"inside the page":        {"t15", 2},
		"before the third":       {"t25", 2},
		"past where it stopped":  {"t35", 1},
		"past the bucket's last": {"t9", 1},
	} {
		t.Run(name, func(t *testing.T) {
			stores := replicas(t, 2)
			if err := stores[0].Update(func(tx *Tx) error {
				for _, n := range []string{"t1", "t2", "t3", "t4", "t5"} {
					if _, err := tx.CreateTenant(n); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			page := func(tx *Tx) error {
				got, next, err := tx.Tenants(Page{Limit: 2})
				if err == nil && (len(got) != 2 || next == "") {
					err = fmt.Errorf("a page of %d tenants, next %q; want 2 and more", len(got), next)
				}
				return err
			}
			create := func(tx *Tx) error { _, err := tx.CreateTenant(c.tenant); return err }
			if got := runsAround(t, stores[0], stores[1], page, create); got != c.runs {
				t.Fatalf("the page's transaction ran %d times, want %d", got, c.runs)
			}
		})
	}
}

// TestEtcdScanThenInsertIsUnique races two replicas, many rounds, each inserting a key
// of its own under a round's prefix only when its scan of the prefix finds none (write
// skew: neither writes what the other read by name): exactly one key per prefix.
func TestEtcdScanThenInsertIsUnique(t *testing.T) {
	stores := replicas(t, 2)
	for round := range 30 {
		prefix := fmt.Sprintf("round%02d/", round)
		var mu sync.Mutex
		next := 0
		errs := raced(stores, func(tx *Tx) error {
			cur := tx.kv.cursor(rangesBucket)
			if k, _ := cur.Seek([]byte(prefix)); k != nil && len(k) >= len(prefix) && string(k[:len(prefix)]) == prefix {
				return nil
			}
			mu.Lock()
			next++
			k := fmt.Sprintf("%sholder%d", prefix, next)
			mu.Unlock()
			return tx.kv.put(rangesBucket, []byte(k), []byte("x"))
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		held := 0
		stores[1].View(func(tx *Tx) error {
			cur := tx.kv.cursor(rangesBucket)
			for k, _ := cur.Seek([]byte(prefix)); k != nil && len(k) >= len(prefix) && string(k[:len(prefix)]) == prefix; k, _ = cur.Next() {
				held++
			}
			return nil
		})
		if held != 1 {
			t.Fatalf("round %d: %d keys under %s, want exactly one", round, held, prefix)
		}
	}
}

// TestEtcdManyReadsFallBackToGenerations: a transaction that read more keys than etcd
// takes compares falls back to its buckets' generations, and still runs again when
// another replica puts a key inside the range it scanned, updates or deletes a key it
// read, or inserts one it read missing; a write to a bucket it did not read leaves it
// to run once.
func TestEtcdManyReadsFallBackToGenerations(t *testing.T) {
	for name, c := range map[string]struct {
		write func(tx *Tx) error
		runs  int
	}{
		"insert inside the scanned range":     {putKey("k25"), 2},
		"update of a key read":                {func(tx *Tx) error { return tx.kv.put("test_many", []byte("m100"), []byte("new")) }, 2},
		"insert of a key read missing":        {func(tx *Tx) error { return tx.kv.put("test_many", []byte("m200"), []byte("new")) }, 2},
		"delete of a key read":                {func(tx *Tx) error { return tx.kv.del("test_many", []byte("m100")) }, 2},
		"a write to a bucket it did not read": {func(tx *Tx) error { return tx.kv.put("test_other", []byte("m100"), []byte("new")) }, 1},
	} {
		t.Run(name, func(t *testing.T) {
			stores := replicas(t, 2)
			if err := stores[0].Update(func(tx *Tx) error {
				for _, k := range []string{"k20", "k30"} {
					if err := tx.kv.put(rangesBucket, []byte(k), []byte("v")); err != nil {
						return err
					}
				}
				return tx.kv.put("test_many", []byte("m100"), []byte("v"))
			}); err != nil {
				t.Fatal(err)
			}
			scan := func(tx *Tx) error {
				for i := range 2 * etcdMaxTxnOps {
					tx.kv.get("test_many", fmt.Appendf(nil, "m%d", i))
				}
				cur := tx.kv.cursor(rangesBucket)
				cur.First()
				cur.Next()
				return nil
			}
			if got := runsAround(t, stores[0], stores[1], scan, c.write); got != c.runs {
				t.Fatalf("the transaction ran %d times, want %d", got, c.runs)
			}
		})
	}
}
