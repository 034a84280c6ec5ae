package store

import (
	"bytes"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// FuzzDecodeCursor reads any cursor a client sends: it is refused as INVALID_INPUT at
// cursor, or it is a key under the list's prefix; a cursor EncodeCursor made is read back.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(EncodeCursor([]byte("node/a")), []byte("node/"))
	f.Add(EncodeCursor([]byte("site/a")), []byte("node/"))
	f.Add("bm9kZS9h=", []byte("node/"))
	f.Add("", []byte{})
	f.Add("!!", []byte("x"))
	f.Fuzz(func(t *testing.T, cursor string, prefix []byte) {
		key, err := DecodeCursor(cursor, prefix)
		if err != nil {
			if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "cursor" {
				t.Fatalf("error %v is not INVALID_INPUT at cursor", err)
			}
		} else if !bytes.HasPrefix(key, prefix) {
			t.Fatalf("cursor %q gives %q, outside %q", cursor, key, prefix)
		}
		own := append(bytes.Clone(prefix), cursor...)
		if again, err := DecodeCursor(EncodeCursor(own), prefix); err != nil || !bytes.Equal(again, own) {
			t.Fatalf("the cursor of %q reads back as %q, %v", own, again, err)
		}
	})
}
