package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestBackendsAgree runs one random sequence of transactions on a bbolt and an etcd
// backend at once: puts, deletes (of keys there or not), reads, and cursor walks in both
// directions from random places, inside transactions that also wrote (so the etcd
// cursor lays its buffered writes over what is stored) and some that fail (so nothing of
// them stays). Every answer must be the same on both.
func TestBackendsAgree(t *testing.T) {
	var kvs []backend
	for _, b := range testBackends {
		s, err := b.open(t, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		kvs = append(kvs, s.kv)
	}
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
