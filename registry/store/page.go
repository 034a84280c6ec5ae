package store

import (
	"bytes"
	"encoding/base64"
	"slices"

	"github.com/better-compute/better-compute/proto"
)

// MaxPage is the largest page any list returns.
const MaxPage = 200

// Page asks for one page of a list: at most Limit items after Cursor.
type Page struct {
	// Cursor is the opaque cursor a previous page returned; empty for the first page.
	Cursor string
	// Limit is the page size, 1 to MaxPage; 0 means MaxPage.
	Limit int
}

// limit is the effective page size.
func (p Page) limit() int {
	if p.Limit <= 0 || p.Limit > MaxPage {
		return MaxPage
	}
	return p.Limit
}

// EncodeCursor makes the opaque cursor that resumes a scan after key.
func EncodeCursor(key []byte) string { return base64.RawURLEncoding.EncodeToString(key) }

// DecodeCursor reads a cursor back, refusing one that does not belong under prefix.
func DecodeCursor(cursor string, prefix []byte) ([]byte, error) {
	key, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || !bytes.HasPrefix(key, prefix) {
		return nil, proto.Errorf(proto.InvalidInput, "cursor is not one this list returned; start again without it").WithPath("cursor")
	}
	return key, nil
}

// PageOf is one page of items, sorted by key with each key once, as a scan pages a
// bucket: those after the page's cursor (a key PageOf returned), at most its limit, and
// the cursor of the next page, empty at the end. It pages a list computed whole.
func PageOf[T any](items []T, key func(T) []byte, p Page) ([]T, string, error) {
	start := 0
	if p.Cursor != "" {
		after, err := DecodeCursor(p.Cursor, nil)
		if err != nil {
			return nil, "", err
		}
		start, _ = slices.BinarySearchFunc(items, after, func(it T, k []byte) int { return bytes.Compare(key(it), k) })
		if start < len(items) && bytes.Equal(key(items[start]), after) {
			start++
		}
	}
	end := min(start+p.limit(), len(items))
	if end == len(items) {
		return items[start:end], "", nil
	}
	return items[start:end], EncodeCursor(key(items[end-1])), nil
}

// scan visits the entries of bucket under prefix in key order, starting after the page's
// cursor, and stops once fn has accepted page.limit() of them. fn reports whether it
// kept the entry (filters skip entries without counting them). The returned cursor is
// empty when the scan reached the end.
func (t *Tx) scan(bucket string, prefix []byte, p Page, fn func(k, v []byte) (bool, error)) (string, error) {
	var after []byte
	if p.Cursor != "" {
		var err error
		if after, err = DecodeCursor(p.Cursor, prefix); err != nil {
			return "", err
		}
	}
	kept := 0
	last, more, err := t.walk(bucket, prefix, after, func() bool { return kept == p.limit() }, func(k, v []byte) error {
		ok, err := fn(k, v)
		if ok {
			kept++
		}
		return err
	})
	if err != nil || !more {
		return "", err
	}
	return EncodeCursor(last), nil
}
