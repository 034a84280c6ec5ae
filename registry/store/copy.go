package store

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
)

// copyChunk bounds the keys, and copyChunkBytes the bytes, one copying transaction writes;
// a record larger than copyChunkBytes (up to about 1 MiB: a section, a profile) goes in a
// transaction of its own.
const (
	copyChunk      = 100
	copyChunkBytes = 512 << 10
)

// ErrNotEmpty is returned by CopyTo when the destination already holds keys (on etcd:
// any key under its prefix).
var ErrNotEmpty = errors.New("the destination store is not empty")

// The phases of a copy its progress tells of, bucket by bucket.
const (
	// CopyCopied: the bucket's records are written to the destination.
	CopyCopied = "copied"
	// CopyReadBack: the bucket's records are read back from the destination and compared.
	CopyReadBack = "read back"
)

// CopyStats is what CopyTo copied.
type CopyStats struct {
	// Buckets and Records count what was copied and then read back equal.
	Buckets, Records int
	// Bytes is the size of the keys and values copied.
	Bytes int64
}

// CopyTo copies every record and index entry of s into dst, which must hold none but
// the format key its open wrote (ErrNotEmpty otherwise: a copy never merges into
// existing records), then reads every one back from dst and compares it byte for byte
// with s, and reports a record missing, different or extra in dst. Nothing may write s
// or dst meanwhile: copy a registry that is stopped. progress, when set, is told of
// each bucket's count as it is copied (CopyCopied), then as it is read back and compared
// (CopyReadBack).
func (s *Store) CopyTo(dst *Store, progress func(phase, bucket string, records int)) (CopyStats, error) {
	var stats CopyStats
	err := dst.kv.view(func(tx kvTx) error {
		names := slices.DeleteFunc(tx.buckets(), func(name string) bool { return name == bucketFormat })
		if len(names) > 0 {
			return fmt.Errorf("%w (buckets %v): copy only into an empty store (a new etcd prefix)", ErrNotEmpty, names)
		}
		return nil
	})
	if err != nil {
		return stats, err
	}
	err = s.kv.view(func(src kvTx) error {
		for _, name := range src.buckets() {
			n, err := copyBucket(src, dst.kv, name, &stats)
			if err != nil {
				return err
			}
			stats.Buckets++
			if progress != nil {
				progress(CopyCopied, name, n)
			}
		}
		return nil
	})
	if err != nil {
		return stats, err
	}
	return stats, s.compare(dst, stats, progress)
}

// copyBucket copies one bucket in transactions of at most copyChunk keys.
func copyBucket(src kvTx, dst backend, name string, stats *CopyStats) (int, error) {
	type pair struct{ k, v []byte }
	var chunk []pair
	size, n := 0, 0
	flush := func() error {
		err := dst.update(func(tx kvTx) error {
			for _, p := range chunk {
				if err := tx.put(name, p.k, p.v); err != nil {
					return err
				}
			}
			return nil
		})
		chunk, size = chunk[:0], 0
		return err
	}
	c := src.cursor(name)
	for k, v := c.First(); k != nil; k, v = c.Next() {
		// A full chunk goes before the record, and so does one the record would take past
		// copyChunkBytes: a chunk of half a MiB and a record of 1 MiB are more than etcd
		// takes by default.
		if len(chunk) == copyChunk || len(chunk) > 0 && size+len(k)+len(v) > copyChunkBytes {
			if err := flush(); err != nil {
				return n, fmt.Errorf("copy %s: %w", name, err)
			}
		}
		chunk = append(chunk, pair{bytes.Clone(k), bytes.Clone(v)})
		size += len(k) + len(v)
		n++
		stats.Records++
		stats.Bytes += int64(len(k) + len(v))
	}
	if len(chunk) > 0 {
		if err := flush(); err != nil {
			return n, fmt.Errorf("copy %s: %w", name, err)
		}
	}
	return n, nil
}

// compare reads dst back against s, record by record, telling progress, when set, of
// each bucket's count read back.
func (s *Store) compare(dst *Store, copied CopyStats, progress func(phase, bucket string, records int)) error {
	var errs []error
	read := 0
	err := s.kv.view(func(src kvTx) error {
		return dst.kv.view(func(got kvTx) error {
			names := src.buckets()
			for _, name := range got.buckets() {
				if !slices.Contains(names, name) {
					errs = append(errs, fmt.Errorf("bucket %s is in the copy but not in the source", name))
				}
			}
			for _, name := range names {
				before := read
				a, b := src.cursor(name), got.cursor(name)
				ka, va := a.First()
				kb, vb := b.First()
				for ka != nil || kb != nil {
					switch c := compareKeys(ka, kb); {
					case c < 0:
						errs = append(errs, fmt.Errorf("%s/%q is missing from the copy", name, ka))
						ka, va = a.Next()
					case c > 0:
						errs = append(errs, fmt.Errorf("%s/%q is in the copy but not in the source", name, kb))
						kb, vb = b.Next()
					default:
						if !bytes.Equal(va, vb) {
							errs = append(errs, fmt.Errorf("%s/%q differs in the copy", name, ka))
						}
						read++
						ka, va = a.Next()
						kb, vb = b.Next()
					}
				}
				if progress != nil {
					progress(CopyReadBack, name, read-before)
				}
			}
			return nil
		})
	})
	if err == nil && len(errs) == 0 && read != copied.Records {
		err = fmt.Errorf("read back %d records, copied %d", read, copied.Records)
	}
	if err := errors.Join(append(errs, err)...); err != nil {
		return fmt.Errorf("store: the copy is not the source: %w", err)
	}
	return nil
}

// compareKeys orders keys with nil (past the end) last.
func compareKeys(a, b []byte) int {
	switch {
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return bytes.Compare(a, b)
}
