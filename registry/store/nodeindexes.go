package store

import (
	"errors"
	"fmt"

	"github.com/better-compute/better-compute/proto"
)

// reindexChunk bounds the entries one reindexing transaction writes.
const reindexChunk = 100

// nodeIndex is an index whose entries each node's record alone says, every key ending
// in the node's id: written with the node (writeEntries), compared with the nodes by
// Check (diff) and brought up to them at every open (reindexNodes).
type nodeIndex struct {
	bucket string
	// entries are node n's entries, key -> value; none for the zero Node.
	entries func(n Node) map[string]string
	// missing and stale are Check's reports of a node without one of its entries and of
	// an entry of a node that does not have it.
	missing func(id, key string) error
	stale   func(key, id string) error
}

// nodeIndexes are the indexes the nodes' records say.
var nodeIndexes = []nodeIndex{nodesByBMC, nodesBySiteMAC}

// writeEntries keeps ix for node n, which was old (the zero Node when n is new), and
// reports whether n's entries differ from old's.
func (t *Tx) writeEntries(ix nodeIndex, old, n Node) (bool, error) {
	was, want := ix.entries(old), ix.entries(n)
	changed := false
	for k := range was {
		if _, keep := want[k]; !keep {
			changed = true
			if err := t.del(ix.bucket, []byte(k)); err != nil {
				return changed, err
			}
		}
	}
	for k, v := range want {
		if w, had := was[k]; !had || w != v {
			changed = true
			if err := t.putRaw(ix.bucket, []byte(k), []byte(v)); err != nil {
				return changed, err
			}
		}
	}
	return changed, nil
}

// indexDiff is how a node index differs from what the nodes say: missing are the
// entries a node should have and does not (key -> its value), stale the entries no node
// has (a node gone, or one whose record says another). Both are empty in a store this
// registry alone wrote.
type indexDiff struct {
	missing map[string]string
	stale   []string
}

// diffs compares every node index with what all the nodes say (every one: not a page of
// them), as tx reads them, reading the nodes once for all the indexes: one indexDiff for
// each of nodeIndexes, in its order.
func (t *Tx) diffs() ([]indexDiff, error) {
	out := make([]indexDiff, len(nodeIndexes))
	for i := range out {
		out[i].missing = map[string]string{}
	}
	_, _, err := t.walk(bucketNodes, nil, nil, func() bool { return false }, func(k, _ []byte) error {
		n, err := t.Node(string(k))
		for i, ix := range nodeIndexes {
			for key, v := range ix.entries(n) {
				out[i].missing[key] = v
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, ix := range nodeIndexes {
		c := t.kv.cursor(ix.bucket)
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if value, ok := out[i].missing[string(k)]; ok && value == string(v) {
				delete(out[i].missing, string(k))
			} else if !ok {
				out[i].stale = append(out[i].stale, string(k))
			}
		}
	}
	return out, nil
}

// checkNodeIndexes is Check's report of the node indexes: each entry missing, and each
// stale one of a node that exists (one of a node gone is reported as an index entry
// naming no record).
func (t *Tx) checkNodeIndexes() []error {
	diffs, err := t.diffs()
	errs := []error{err}
	for i, d := range diffs {
		ix := nodeIndexes[i]
		for k := range d.missing {
			errs = append(errs, ix.missing(string(afterLastNUL([]byte(k), nil)), k))
		}
		for _, k := range d.stale {
			if id := afterLastNUL([]byte(k), nil); t.kv.get(bucketNodes, id) != nil {
				errs = append(errs, ix.stale(k, string(id)))
			}
		}
	}
	return errs
}

// reindexNodes makes every node index say what the nodes do, at every open: it writes
// the entries of the nodes without theirs (a store written before the index existed, or
// a node a replica of an earlier version wrote since) and drops the entries no node has
// (such a replica's change of a node). It reads in one transaction and writes only what
// differs, reindexChunk entries a transaction, each read again there: a store that
// needs nothing is not written (a store copy's destination stays empty), and replicas
// doing it at once write the same.
func (s *Store) reindexNodes() error {
	var diffs []indexDiff
	if err := s.View(func(tx *Tx) (err error) { diffs, err = tx.diffs(); return err }); err != nil {
		return err
	}
	var errs []error
	for i, d := range diffs {
		if err := s.reindex(nodeIndexes[i], d); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", nodeIndexes[i].bucket, err))
		}
	}
	return errors.Join(errs...)
}

// reindex writes the entries d says ix misses and drops its stale ones.
func (s *Store) reindex(ix nodeIndex, d indexDiff) error {
	keys := d.stale
	for k := range d.missing {
		keys = append(keys, k)
	}
	var err error
	for len(keys) > 0 && err == nil {
		chunk := keys[:min(reindexChunk, len(keys))]
		keys = keys[len(chunk):]
		err = s.Update(func(tx *Tx) error {
			for _, k := range chunk {
				n, err := tx.Node(string(afterLastNUL([]byte(k), nil)))
				if err != nil && proto.CodeOf(err) != proto.NotFound {
					return err
				}
				if v, ok := ix.entries(n)[k]; ok && err == nil {
					err = tx.putRaw(ix.bucket, []byte(k), []byte(v))
				} else {
					err = tx.del(ix.bucket, []byte(k))
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	return err
}
