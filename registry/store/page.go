package store

import (
	"bytes"
	"encoding/base64"
	"errors"
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
		return nil, errForeignCursor()
	}
	return key, nil
}

// errForeignCursor refuses a cursor that no page of the list returned.
func errForeignCursor() error {
	return proto.Errorf(proto.InvalidInput, "cursor is not one this list returned; start again without it").WithPath("cursor")
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

// errPageFull stops scan's walk at the first entry past a full page that fn takes: the
// walk reads no further, so a transaction conflicts only with writes up to that entry.
var errPageFull = errors.New("store: the page is full and an entry follows it")

// scan visits the entries of bucket under prefix in key order, starting after the page's
// cursor, and puts page.limit() of them on the page. fn reads an entry and returns what
// puts it on the page (an append, say), or nil to skip it: a filter skips an entry
// without counting it. scan calls the append only for an entry the page takes. The
// returned cursor, after the page's last entry, is offered only when fn returns an
// append for an entry after the page: a full page followed only by entries the filter
// skips is the end of the list, and a cursor there would lead to an empty page and tell
// the caller of entries it does not see.
func (t *Tx) scan(bucket string, prefix []byte, p Page, fn func(k, v []byte) (func(), error)) (string, error) {
	var after []byte
	if p.Cursor != "" {
		var err error
		if after, err = DecodeCursor(p.Cursor, prefix); err != nil {
			return "", err
		}
	}
	var last []byte
	kept := 0
	_, _, err := t.walk(bucket, prefix, after, func() bool { return false }, func(k, v []byte) error {
		add, err := fn(k, v)
		switch {
		case err != nil || add == nil:
			return err
		case kept == p.limit():
			return errPageFull
		}
		add()
		kept, last = kept+1, bytes.Clone(k)
		return nil
	})
	if errors.Is(err, errPageFull) {
		return EncodeCursor(last), nil
	}
	return "", err
}
