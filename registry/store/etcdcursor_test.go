package store

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/btree"
)

// cursorBucket is the bucket the cursor tests and benchmark walk; cursorKey its i-th key.
const cursorBucket = "cursor"

func cursorKey(i int) []byte { return fmt.Appendf(nil, "k%04d", i) }

// cursorOp is one op of a cursor script: a move of the cursor (first, last, seek key,
// next, prev) or a write to its bucket (put key, del key) while the cursor stands.
type cursorOp struct {
	kind string
	key  []byte
}

func repeat(kind string, n int) []cursorOp {
	ops := make([]cursorOp, n)
	for i := range ops {
		ops[i].kind = kind
	}
	return ops
}

// cursorStep is what one op of a script did: where the cursor stood before it (nil:
// nowhere), and the key and value a move landed on (nil past either end). A write does
// not move, nor does a next or prev while the cursor stands nowhere (it is not asked).
type cursorStep struct {
	op         cursorOp
	at         []byte
	moved      bool
	key, value []byte
}

func (s cursorStep) String() string {
	if !s.moved {
		return fmt.Sprintf("%s %q", s.op.kind, s.op.key)
	}
	return fmt.Sprintf("%s %q from %q: %q=%q", s.op.kind, s.op.key, s.at, s.key, s.value)
}

// runCursor runs script with c, a cursor of cursorBucket in tx, and returns what each op
// did. bbolt's cursor must be positioned again after a write to its bucket: with reseek,
// a next or prev after a write starts from a Seek to the key the cursor stood on, so that
// bbolt's answers are the reference the etcd cursor's (which needs none) are compared to.
func runCursor(tx kvTx, c cursor, script []cursorOp, reseek bool) ([]cursorStep, error) {
	var steps []cursorStep
	var at []byte
	wrote := false
	for i, op := range script {
		s := cursorStep{op: op, at: at, moved: true}
		var k, v []byte
		switch op.kind {
		case "put", "del":
			s.moved, wrote = false, true
			var err error
			if op.kind == "put" {
				err = tx.put(cursorBucket, op.key, fmt.Appendf(nil, "put%d", i))
			} else {
				err = tx.del(cursorBucket, op.key)
			}
			if err != nil {
				return nil, err
			}
		case "first":
			k, v = c.First()
		case "last":
			k, v = c.Last()
		case "seek":
			k, v = c.Seek(op.key)
		case "next", "prev":
			switch {
			case at == nil:
				s.moved = false
			case !(reseek && wrote) && op.kind == "next":
				k, v = c.Next()
			case !(reseek && wrote):
				k, v = c.Prev()
			case op.kind == "next":
				if k, v = c.Seek(at); bytes.Equal(k, at) {
					k, v = c.Next()
				}
			default:
				if k, _ = c.Seek(at); k == nil {
					k, v = c.Last()
				} else {
					k, v = c.Prev()
				}
			}
		default:
			return nil, fmt.Errorf("op %d: no op %q", i, op.kind)
		}
		if s.moved {
			wrote = false
			at, s.key, s.value = bytes.Clone(k), bytes.Clone(k), bytes.Clone(v)
		}
		steps = append(steps, s)
	}
	return steps, nil
}

// cursorRead is the range of full keys [from, to) that steps read with a cursor of the
// bucket [start, end), as docs/store.md says a cursor reads: each move from where it
// began to the key it landed on, or to the bucket's bound when it landed on none.
func cursorRead(start, end string, steps []cursorStep) (from, to string) {
	widen := func(lo, hi string) {
		lo, hi = max(lo, start), min(hi, end)
		switch {
		case lo >= hi:
		case from == to:
			from, to = lo, hi
		default:
			from, to = min(from, lo), max(to, hi)
		}
	}
	for _, s := range steps {
		if !s.moved {
			continue
		}
		began := map[string]string{"first": start, "last": end, "seek": start + string(s.op.key),
			"next": start + string(s.at) + "\x00", "prev": start + string(s.at)}[s.op.kind]
		switch forward := s.op.kind != "last" && s.op.kind != "prev"; {
		case forward && s.key != nil:
			widen(began, start+string(s.key)+"\x00")
		case forward:
			widen(began, end)
		case s.key != nil:
			widen(start+string(s.key), began)
		default:
			widen(start, began)
		}
	}
	return from, to
}

// checkCursorRead fails t when c, an etcd cursor, read other than steps did.
func checkCursorRead(t testing.TB, name string, c cursor, steps []cursorStep) {
	t.Helper()
	ec := c.(*etcdCursor)
	if from, to := cursorRead(ec.start, ec.end, steps); ec.readFrom != from || ec.readEnd != to {
		t.Errorf("%s: the cursor read [%q, %q), want [%q, %q)", name, ec.readFrom, ec.readEnd, from, to)
	}
}

func logSteps(steps []cursorStep) string {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintln(&b, s)
	}
	return b.String()
}

// TestCursorsAgreeAcrossReadAhead runs cursor scripts on a bucket of 300 keys, more
// than the etcd cursor reads ahead at once, on bbolt and etcd: walks across the runs it
// reads ahead, seeks into and past them, Prev after Next and Next after Prev, in a View
// and in a read-write transaction; and in read-write transactions that put and delete
// keys ahead of and behind the cursor as it walks (the key it stands on, keys inside the
// run it read ahead, a stretch of deleted keys longer than a run, keys past either end),
// then walk over them both ways. Every answer is the same on both backends, and the etcd
// cursor of a read-write transaction read the range its moves say (cursorRead).
func TestCursorsAgreeAcrossReadAhead(t *testing.T) {
	const n = 300
	k := func(i int) []byte { return cursorKey(2 * i) } // odd keys fall between them
	between := func(i int) []byte { return cursorKey(2*i + 1) }
	op := func(kind string, key []byte) []cursorOp { return []cursorOp{{kind, key}} }
	var stretch []cursorOp
	for i := 60; i < 140; i++ {
		stretch = append(stretch, cursorOp{"del", k(i)})
	}
	walks := map[string][]cursorOp{
		"the whole bucket": slices.Concat(op("first", nil), repeat("next", n+1)),
		"seek and on": slices.Concat(op("seek", between(100)), repeat("next", 150), op("seek", k(3)), repeat("next", 5),
			op("seek", between(n))),
		"next then prev": slices.Concat(op("seek", k(10)), repeat("next", 130), repeat("prev", 70), repeat("next", 200)),
		"prev then next": slices.Concat(op("last", nil), repeat("prev", 140), repeat("next", 150), op("seek", k(250)),
			repeat("prev", 260)),
	}
	writes := map[string][]cursorOp{
		"around the cursor": slices.Concat(op("first", nil), repeat("next", 5),
			op("put", between(6)), op("del", k(7)), op("del", k(8)), op("put", between(3)), op("del", k(1)),
			repeat("next", 4), op("del", k(9)), op("put", between(40)), repeat("next", 40), repeat("prev", 20)),
		"the key it stands on": slices.Concat(op("seek", k(100)), op("del", k(100)), repeat("next", 3), op("del", k(102)),
			repeat("prev", 3), op("put", k(100)), repeat("next", 2)),
		"a stretch ahead": slices.Concat(op("seek", k(50)), repeat("next", 3), stretch, op("put", between(120)),
			repeat("next", 10), repeat("prev", 12), op("put", between(150)), op("del", k(151)), repeat("next", 50)),
		"past the ends": slices.Concat(op("last", nil), op("put", cursorKey(9999)), op("del", k(n-1)), repeat("next", 2),
			op("first", nil), op("put", []byte("a")), op("del", k(0)), repeat("prev", 2), op("seek", []byte("a")),
			repeat("prev", 1)),
	}
	// The walks run in a read-write transaction too, whose cursor keeps the range it read.
	maps.Copy(writes, walks)
	logs := map[string][]string{}
	for _, kv := range openBackends(t) {
		_, etcd := kv.(*etcdBackend)
		putKeys(t, kv, cursorBucket, n, k)
		run := func(name string, tx kvTx, script []cursorOp, readWrite bool) {
			c := tx.cursor(cursorBucket)
			steps, err := runCursor(tx, c, script, !etcd)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if etcd && readWrite {
				checkCursorRead(t, name, c, steps)
			}
			logs[name] = append(logs[name], logSteps(steps))
		}
		for name, script := range walks {
			kv.view(func(tx kvTx) error { run("view: "+name, tx, script, false); return nil })
		}
		for name, script := range writes {
			runs := 0
			err := kv.update(func(tx kvTx) error { runs++; run("update: "+name, tx, script, true); return errRollback })
			if !errors.Is(err, errRollback) || runs != 1 {
				t.Fatalf("update: %s: %v after %d runs", name, err, runs)
			}
		}
	}
	for name, l := range logs {
		if l[0] != l[1] {
			t.Errorf("%s: bbolt answered\n%s\netcd answered\n%s", name, l[0], l[1])
		}
	}
	if last := fmt.Sprintf("%q=%q", k(n-1), fmt.Sprint("v", n-1)); !strings.Contains(logs["view: the whole bucket"][0], last) {
		t.Errorf("the walk of the whole bucket did not reach its last key, %s:\n%.2000s", last, logs["view: the whole bucket"][0])
	}
}

// errRollback ends a transaction of a test that keeps nothing of it.
var errRollback = errors.New("keep nothing")

// cursorOps are the ops a fuzzed script is made of, by the first byte of each pair.
var cursorOps = []string{"first", "last", "seek", "next", "prev", "put", "del"}

// FuzzCursorsAgree runs a cursor script made of the input on a bucket of keys the seed
// picks (none, some or all of 400) on an etcd cursor over a snapshot of them and on
// bbolt's over the same keys, in a transaction that writes or, the script's writes left
// out, in a read-only one. Each op is two bytes: the op (cursorOps, by the first byte),
// and its key, stored or not, around the stored ones or past them (by both), or for
// next and prev how many steps. Every answer is the same on both; the etcd cursor read
// the range its moves say (cursorRead), and nothing in a read-only transaction.
func FuzzCursorsAgree(f *testing.F) {
	db, err := openBbolt(f.TempDir(), time.Second, false)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.close() })
	f.Add(uint64(1), []byte{0, 0, 3, 79, 3, 79, 3, 79, 4, 50, 3, 79}, true)
	f.Add(uint64(2), []byte{2, 100, 3, 10, 5, 120, 6, 122, 6, 124, 12, 110, 3, 40, 4, 20, 6, 0, 1, 0, 4, 79}, false)
	f.Add(uint64(3), []byte{1, 0, 4, 79, 3, 79, 2, 255, 4, 3, 26, 7, 3, 2}, false)
	f.Add(uint64(4), []byte{0, 0, 6, 2, 6, 4, 6, 6, 6, 8, 6, 10, 3, 79, 4, 79}, false)
	f.Add(uint64(1), []byte{2, 200, 3, 5, 2, 64, 3, 5, 0, 0, 3, 3}, true)
	f.Fuzz(func(t *testing.T, seed uint64, input []byte, readOnly bool) {
		rng := rand.New(rand.NewPCG(seed, seed))
		var stored [][]byte
		density := rng.IntN(101)
		for i := range 400 {
			if rng.IntN(100) < density {
				stored = append(stored, cursorKey(2*i))
			}
		}
		var script []cursorOp
		for pair := range slices.Chunk(input, 2) {
			if len(pair) < 2 {
				break
			}
			kind := cursorOps[int(pair[0])%len(cursorOps)]
			switch {
			case readOnly && (kind == "put" || kind == "del"):
				continue
			case kind == "next" || kind == "prev":
				script = append(script, repeat(kind, int(pair[1])%80+1)...)
				continue
			}
			key := cursorKey(int(pair[1]) * 800 / 256)
			switch pair[0] / byte(len(cursorOps)) % 4 {
			case 1:
				key = append(key, 0)
			case 2:
				key = append(key, 'x')
			case 3:
				key = []byte{pair[1]}
			}
			script = append(script, cursorOp{kind, key})
		}

		e := &etcdBackend{prefix: "p/"}
		tree := btree.NewG(mirrorDegree, mirrorLess)
		for _, k := range stored {
			tree.ReplaceOrInsert(mirrorKV{key: e.recKey(cursorBucket, k), value: append([]byte("v"), k...), mod: 2})
		}
		// The keys around the bucket's: its generation and deletion generation, and
		// buckets whose names sort next to its own.
		for _, key := range []string{e.genKey(cursorBucket), e.delKey(cursorBucket), e.recKey("cursor.x", cursorKey(0)),
			e.recKey("cursor0", []byte("a")), e.recKey("cursorz", []byte("a"))} {
			tree.ReplaceOrInsert(mirrorKV{key: key, value: []byte("around"), mod: 1})
		}
		tx := e.txOn(&mirrorSnap{tree: tree, rev: 2}, readOnly)
		c := tx.cursor(cursorBucket)
		got, err := runCursor(tx, c, script, false)
		if err != nil {
			t.Fatal(err)
		}
		if ec := c.(*etcdCursor); readOnly && ec.readFrom+ec.readEnd != "" {
			t.Errorf("a read-only transaction's cursor read [%q, %q), want nothing kept", ec.readFrom, ec.readEnd)
		} else if !readOnly {
			checkCursorRead(t, "the script", c, got)
		}

		var want []cursorStep
		err = db.update(func(tx kvTx) error {
			// A cursor of a missing bucket walks nothing, even after a put.
			if _, err := tx.(boltTx).tx.CreateBucketIfNotExists([]byte(cursorBucket)); err != nil {
				return err
			}
			for _, k := range stored {
				if err := tx.put(cursorBucket, k, append([]byte("v"), k...)); err != nil {
					return err
				}
			}
			want, err = runCursor(tx, tx.cursor(cursorBucket), script, true)
			if err != nil {
				return err
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
		if g, w := logSteps(got), logSteps(want); g != w {
			t.Fatalf("%d keys stored; etcd answered\n%s\nbbolt answered\n%s", len(stored), g, w)
		}
	})
}

// BenchmarkEtcdCursor walks a bucket of 1,000 records, between two buckets of 1,000
// more, in a read-only transaction over the etcd backend's mirror as the store
// loaded it, beside bbolt's cursor over the same records (its peer): the whole bucket
// (walk), a page of 20 from a key in the middle (page), and one key sought (seek).
func BenchmarkEtcdCursor(b *testing.B) {
	const n = 1000
	shapes := []struct {
		name string
		read func(c cursor, i int) int
	}{
		{"walk", func(c cursor, _ int) int {
			read := 0
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				read++
			}
			return read
		}},
		{"page", func(c cursor, i int) int {
			read := 0
			for k, _ := c.Seek(cursorKey(i % (n - 20))); k != nil && read < 20; k, _ = c.Next() {
				read++
			}
			return read
		}},
		{"seek", func(c cursor, i int) int {
			if k, _ := c.Seek(cursorKey(i % n)); k == nil {
				return 0
			}
			return 1
		}},
	}
	want := map[string]int{"walk": n, "page": 20, "seek": 1}
	for _, be := range testBackends {
		s, err := be.place(b)(b, Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for _, bucket := range []string{"before", cursorBucket, "later"} {
			putKeys(b, s.kv, bucket, n, cursorKey)
		}
		view := onOneSnapshot(b, s.kv, true, s.kv.view)
		for _, shape := range shapes {
			b.Run(shape.name+"/"+be.name, func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					view(func(tx kvTx) error {
						if got := shape.read(tx.cursor(cursorBucket), i); got != want[shape.name] {
							b.Fatalf("read %d records, want %d", got, want[shape.name])
						}
						return nil
					})
					i++
				}
			})
		}
	}
}

// onOneSnapshot is how a benchmark runs its transactions on kv: on etcd, on one
// snapshot of the mirror taken now (read-only or not, never committed: no barrier's
// round a transaction); on bbolt, with run (its view or update).
func onOneSnapshot(b *testing.B, kv backend, readOnly bool, run func(func(kvTx) error) error) func(func(kvTx) error) error {
	e, ok := kv.(*etcdBackend)
	if !ok {
		return run
	}
	snap, err := e.snapshot()
	if err != nil {
		b.Fatal(err)
	}
	return func(fn func(kvTx) error) error { return fn(e.txOn(snap, readOnly)) }
}

// BenchmarkEtcdCursorOverWrites: a read-write transaction puts 1,000 keys into a bucket
// of 1,000 stored ones, one after each, and walks the bucket: each step finds the
// transaction's own next key among its puts as well as the snapshot's. The transaction
// is rolled back (bbolt) or never committed (etcd, on the mirror as loaded).
func BenchmarkEtcdCursorOverWrites(b *testing.B) {
	const n = 1000
	rolledBack := errors.New("rolled back")
	for _, be := range testBackends {
		s, err := be.place(b)(b, Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		putKeys(b, s.kv, cursorBucket, n, cursorKey)
		update := onOneSnapshot(b, s.kv, false, s.kv.update)
		b.Run(be.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				err := update(func(tx kvTx) error {
					for i := range n {
						if err := tx.put(cursorBucket, append(cursorKey(i), '+'), nil); err != nil {
							return err
						}
					}
					read := 0
					c := tx.cursor(cursorBucket)
					for k, _ := c.First(); k != nil; k, _ = c.Next() {
						read++
					}
					if read != 2*n {
						b.Fatalf("read %d records, want %d", read, 2*n)
					}
					return rolledBack
				})
				if err != rolledBack {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCursorWalksOnlyItsTransactionsLivePuts: a read-write transaction's cursor walks,
// forward and back, the stored keys and the keys the transaction put in its bucket,
// never a key the transaction put and then deleted, nor one it put in a bucket whose
// name sorts beside it (before its range, "cursor-a"; after it, "cursor0" and
// "cursorz"), on both backends.
func TestCursorWalksOnlyItsTransactionsLivePuts(t *testing.T) {
	rolledBack := errors.New("rolled back")
	eachBackend(t, func(t *testing.T, open opener) {
		s, err := open(t, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		putKeys(t, s.kv, cursorBucket, 4, cursorKey) // k0000..k0003
		var forward, back []string
		err = s.kv.update(func(tx kvTx) error {
			forward, back = nil, nil
			for _, bucket := range []string{"cursor-a", "cursor0", "cursorz"} {
				for _, key := range []string{"a", "k0001+", "zz"} {
					if err := tx.put(bucket, []byte(key), []byte("x")); err != nil {
						return err
					}
				}
			}
			for _, key := range []string{"k0000+", "k0001+", "k0002+", "k0003+"} {
				if err := tx.put(cursorBucket, []byte(key), []byte("x")); err != nil {
					return err
				}
			}
			for _, key := range []string{"k0001+", "k0003+", "k0002"} {
				if err := tx.del(cursorBucket, []byte(key)); err != nil {
					return err
				}
			}
			c := tx.cursor(cursorBucket)
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				forward = append(forward, string(k))
			}
			for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
				back = append(back, string(k))
			}
			return rolledBack
		})
		if err != rolledBack {
			t.Fatal(err)
		}
		want := []string{"k0000", "k0000+", "k0001", "k0002+", "k0003"}
		if !slices.Equal(forward, want) {
			t.Errorf("forward: walked %q, want %q", forward, want)
		}
		slices.Reverse(want)
		if !slices.Equal(back, want) {
			t.Errorf("back: walked %q, want %q", back, want)
		}
	})
}
