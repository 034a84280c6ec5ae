package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// openBackends opens an empty store of each backend, closed when the test ends, and
// returns their backends.
func openBackends(t *testing.T) []backend {
	t.Helper()
	var kvs []backend
	for _, b := range testBackends {
		s, err := b.place(t)(t, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		kvs = append(kvs, s.kv)
	}
	return kvs
}

// putKeys puts key(i) for i up to n into bucket, valued "v" and i, in one transaction
// of kv.
func putKeys(t testing.TB, kv backend, bucket string, n int, key func(int) []byte) {
	t.Helper()
	if err := kv.update(func(tx kvTx) error {
		for i := range n {
			if err := tx.put(bucket, key(i), fmt.Appendf(nil, "v%d", i)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestBackendsAgree runs one random sequence of transactions on a bbolt and an etcd
// backend at once: puts, deletes (of keys there or not), reads, and cursor walks in both
// directions from random places, inside transactions that also wrote (so the etcd
// cursor lays its buffered writes over what is stored) and some that fail (so nothing of
// them stays). Every answer must be the same on both.
func TestBackendsAgree(t *testing.T) {
	kvs := openBackends(t)
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() []byte {
		// Few distinct keys, some sharing prefixes, some with NUL and 0xff bytes.
		return []byte([]string{"a", "a\x00b", "ab", "b", "b\xff", "c", "ca", "d\x00", "e", "zz"}[rng.IntN(10)])
	}
	buckets := []string{"one", "one.x", "two"}
	for txn := range 300 {
		fail := rng.IntN(5) == 0
		var ops []func(tx kvTx) string
		for range 1 + rng.IntN(12) {
			b, k, v := buckets[rng.IntN(len(buckets))], key(), fmt.Appendf(nil, "v%d", rng.IntN(1000))
			switch rng.IntN(6) {
			case 0, 1:
				ops = append(ops, func(tx kvTx) string { return fmt.Sprint("put ", tx.put(b, k, v)) })
			case 2:
				ops = append(ops, func(tx kvTx) string { return fmt.Sprint("del ", tx.del(b, k)) })
			case 3:
				ops = append(ops, func(tx kvTx) string { return fmt.Sprintf("get %q", tx.get(b, k)) })
			case 4:
				steps := rng.IntN(6)
				ops = append(ops, func(tx kvTx) string {
					c := tx.cursor(b)
					var out bytes.Buffer
					left := steps
					for k, v := c.Seek(k); k != nil && left > 0; k, v = c.Next() {
						fmt.Fprintf(&out, "%q=%q ", k, v)
						left--
					}
					return "seek " + out.String()
				})
			case 5:
				ops = append(ops, func(tx kvTx) string {
					c := tx.cursor(b)
					var out bytes.Buffer
					for k, v := c.Last(); k != nil; k, v = c.Prev() {
						fmt.Fprintf(&out, "%q=%q ", k, v)
					}
					k, _ := c.First()
					return fmt.Sprintf("back %s first %q", out.String(), k)
				})
			}
		}
		var logs []string
		for _, kv := range kvs {
			var log bytes.Buffer
			err := kv.update(func(tx kvTx) error {
				log.Reset()
				for _, op := range ops {
					fmt.Fprintln(&log, op(tx))
				}
				if fail {
					return fmt.Errorf("fail")
				}
				return nil
			})
			if (err != nil) != fail {
				t.Fatalf("transaction %d: %v", txn, err)
			}
			logs = append(logs, log.String())
		}
		if logs[0] != logs[1] {
			t.Fatalf("transaction %d: bbolt answered\n%s\netcd answered\n%s", txn, logs[0], logs[1])
		}
	}
	var names []string
	for _, kv := range kvs {
		kv.view(func(tx kvTx) error { names = append(names, fmt.Sprint(tx.buckets())); return nil })
	}
	if names[0] != names[1] {
		t.Fatalf("buckets: bbolt %s, etcd %s", names[0], names[1])
	}
}

// TestBackendsAgreeAcrossPages walks a bucket of 700 keys, over many nodes of bbolt's
// pages and of the etcd mirror's tree, in a View and in a transaction that deleted and
// added keys on the way, from the start and from places around the nodes' bounds: every
// walk answers the same on both backends.
func TestBackendsAgreeAcrossPages(t *testing.T) {
	kvs := openBackends(t)
	const n, bucket = 700, "paged"
	key := func(i int) []byte { return fmt.Appendf(nil, "k%04d", i) }
	walks := func(tx kvTx) string {
		var out bytes.Buffer
		for _, from := range []int{-1, 0, mirrorDegree - 1, mirrorDegree, mirrorDegree + 1, 2*mirrorDegree - 1, 288, 500, n - 1} {
			c := tx.cursor(bucket)
			k, v := c.First()
			if from >= 0 {
				c.Seek(key(from))
				prev, _ := c.Prev()
				fmt.Fprintf(&out, "before %d: %q\n", from, prev)
				k, v = c.Seek(key(from))
			}
			fmt.Fprintf(&out, "from %d:", from)
			for ; k != nil; k, v = c.Next() {
				fmt.Fprintf(&out, " %s=%s", k, v)
			}
			fmt.Fprintln(&out)
		}
		return out.String()
	}
	var logs []string
	for _, kv := range kvs {
		putKeys(t, kv, bucket, n, key)
		var log string
		kv.view(func(tx kvTx) error { log = walks(tx); return nil })
		kv.update(func(tx kvTx) error {
			for i := 0; i < n; i += 7 {
				tx.del(bucket, key(i))
			}
			tx.put(bucket, []byte("k0031x"), []byte("new"))
			tx.put(bucket, []byte("k0300x"), []byte("new"))
			log += walks(tx)
			return errors.New("keep nothing")
		})
		logs = append(logs, log)
	}
	if logs[0] != logs[1] {
		t.Fatalf("bbolt answered\n%s\netcd answered\n%s", logs[0], logs[1])
	}
	if !strings.Contains(logs[0], "k0699=v699") || !strings.Contains(logs[0], "k0300x=new") {
		t.Fatalf("the walks missed keys:\n%.2000s", logs[0])
	}
}
