package store

import (
	"bytes"
	"slices"
)

// entriesDiff compares the index bucket, whose keys entryOf derives from the records of
// bucket records, with every record as tx reads them: the entries of records without
// theirs, then the entries no record has, each in key order, and why each record it
// cannot read was left out (damaged: its entry, if any, is stray).
func entriesDiff[R any](t *Tx, records, index string, entryOf func(R) []byte) (missing, stray [][]byte, damaged []error) {
	want := map[string]bool{}
	c := t.kv.cursor(records)
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var r R
		if err := decode(records, k, v, &r); err != nil {
			damaged = append(damaged, err)
			continue
		}
		want[string(entryOf(r))] = true
	}
	entries := t.kv.cursor(index)
	for k, _ := entries.First(); k != nil; k, _ = entries.Next() {
		if want[string(k)] {
			delete(want, string(k))
		} else {
			stray = append(stray, slices.Clone(k))
		}
	}
	for k := range want {
		missing = append(missing, []byte(k))
	}
	slices.SortFunc(missing, bytes.Compare)
	return missing, stray, damaged
}

// An index a format raise fills: diff tells what its entries lack or have too many of,
// reindex makes the entries it is given say what their records say, read in its own
// transaction.
type derivedIndex struct {
	diff    func(*Tx) (missing, stray [][]byte, damaged []error)
	reindex func(*Tx, [][]byte) error
}

// fill reads the index's differences once and writes them, MaxPruned entries a
// transaction, each read again there.
func (s *Store) fill(ix derivedIndex) error {
	var missing, stray [][]byte
	if err := s.View(func(tx *Tx) error { missing, stray, _ = ix.diff(tx); return nil }); err != nil {
		return err
	}
	for entries := append(missing, stray...); len(entries) > 0; {
		chunk := entries[:min(MaxPruned, len(entries))]
		entries = entries[len(chunk):]
		if err := s.Update(func(tx *Tx) error { return ix.reindex(tx, chunk) }); err != nil {
			return err
		}
	}
	return nil
}

// fillLast is fill in the transaction that raises the format: it walks every record and
// entry (on etcd, conflicting with any record written meanwhile) and writes what still
// differs, errMoreToIndex when that is more than MaxPruned entries.
func (t *Tx) fillLast(ix derivedIndex) error {
	missing, stray, _ := ix.diff(t)
	if len(missing)+len(stray) > MaxPruned {
		return errMoreToIndex
	}
	return ix.reindex(t, append(missing, stray...))
}
