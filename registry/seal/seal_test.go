package seal

import (
	"bytes"
	"errors"
	"testing"
)

// TestSealOpen: a sealed value opens under its key and additional data only, holds no
// plaintext, differs each time (a new nonce), and a value shorter than a nonce is
// ErrShort; a key of another length is refused.
func TestSealOpen(t *testing.T) {
	k, err := New(NewKey())
	if err != nil {
		t.Fatal(err)
	}
	plain, ad := []byte("the plaintext"), []byte("where it is kept")
	sealed := k.Seal(plain, ad)
	if bytes.Contains(sealed, plain) || bytes.Equal(sealed, k.Seal(plain, ad)) {
		t.Errorf("sealed %x: holds the plaintext, or the same nonce twice", sealed)
	}
	if got, err := k.Open(sealed, ad); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("opened %q, %v", got, err)
	}
	if _, err := k.Open(sealed, []byte("elsewhere")); err == nil {
		t.Errorf("opened under other additional data")
	}
	other, _ := New(NewKey())
	if _, err := other.Open(sealed, ad); err == nil {
		t.Errorf("opened under another key")
	}
	changed := bytes.Clone(sealed)
	changed[len(changed)-1] ^= 1
	if _, err := k.Open(changed, ad); err == nil {
		t.Errorf("a changed value opened")
	}
	if _, err := k.Open(sealed[:5], ad); !errors.Is(err, ErrShort) {
		t.Errorf("a value cut short: %v, want ErrShort", err)
	}
	if _, err := New(make([]byte, 16)); err == nil {
		t.Errorf("a 16-byte key was taken")
	}
}
