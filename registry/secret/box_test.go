package secret

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// readBox is the box of the key in dir.
func readBox(dir string) (*Box, error) {
	key, err := ReadKey(dir)
	if err != nil {
		return nil, err
	}
	return New(key)
}

func TestSealedAtRestAndOpenedWithTheSameKey(t *testing.T) {
	dataDir := t.TempDir()
	pkiDir := filepath.Join(dataDir, "pki")
	if err := WriteKey(pkiDir, NewKey()); err != nil {
		t.Fatal(err)
	}
	box, err := readBox(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(pkiDir, KeyFile)); err != nil || st.Mode().Perm() != 0o600 || st.Size() != keySize {
		t.Fatalf("key file: %v %v", st, err)
	}
	st, err := store.Open(dataDir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte("the-plaintext-that-must-never-reach-the-disk")
	var ref string
	if err := st.Update(func(tx *store.Tx) (err error) { ref, err = box.Put(tx, "userdata", "n1", plain); return err }); err != nil {
		t.Fatal(err)
	}
	st.Close()
	raw, err := os.ReadFile(filepath.Join(dataDir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, plain) || bytes.Contains(raw, []byte("must-never")) {
		t.Fatal("the plaintext is in the store's file")
	}

	again, err := readBox(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	if st, err = store.Open(dataDir, store.Options{}); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.View(func(tx *store.Tx) error {
		sec, got, err := again.Get(tx, ref)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, plain) || sec.NodeID != "n1" || sec.Purpose != "userdata" {
			t.Errorf("opened %q for %+v", got, sec)
		}
		_, _, err = again.Get(tx, "userdata_unknown")
		if proto.CodeOf(err) != proto.NotFound {
			t.Errorf("unknown ref: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestCiphertextBoundToRefAndNode(t *testing.T) {
	key := bytes.Repeat([]byte{7}, keySize)
	box, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.Open(t, store.Options{})
	err = st.Update(func(tx *store.Tx) error {
		ref, err := box.Put(tx, "userdata", "n1", []byte("doc"))
		if err != nil {
			return err
		}
		sec, _, err := tx.Secret(ref)
		if err != nil {
			return err
		}
		// The same ciphertext under another node's record must not open.
		moved := store.Secret{Ref: "userdata_moved", Purpose: "userdata", NodeID: "n2", Sealed: sec.Sealed}
		if err := tx.PutSecret(moved); err != nil {
			return err
		}
		if _, _, err := box.Get(tx, moved.Ref); err == nil || proto.CodeOf(err) != proto.Internal {
			t.Errorf("a ciphertext moved to another node opened: %v", err)
		}
		other, _ := New(bytes.Repeat([]byte{8}, keySize))
		if _, _, err := other.Get(tx, ref); err == nil {
			t.Error("another key opened the secret")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(key[:16]); err == nil {
		t.Error("a 16-byte key was taken")
	}
}

// TestOpensSecretsSealedBefore: secrets sealed by an earlier build (testdata, a node's
// and a tenant's, under a fixed key) still open to the same plaintext, and not for
// another record: the sealed format (nonce, then ciphertext; the additional data) has
// not changed.
func TestOpensSecretsSealedBefore(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "sealed-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Key     string
		Secrets []struct {
			Secret    store.Secret
			Plaintext string
		}
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	key, err := hex.DecodeString(golden.Key)
	if err != nil {
		t.Fatal(err)
	}
	box, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	if len(golden.Secrets) != 2 {
		t.Fatalf("testdata holds %d secrets, want a node's and a tenant's", len(golden.Secrets))
	}
	for _, g := range golden.Secrets {
		got, err := box.open(g.Secret)
		if err != nil || string(got) != g.Plaintext {
			t.Errorf("%s: opened %q, %v; want %q", g.Secret.Ref, got, err, g.Plaintext)
		}
		moved := g.Secret
		moved.Ref += "x"
		if _, err := box.open(moved); err == nil {
			t.Errorf("%s opened under another ref", g.Secret.Ref)
		}
	}
}

// The cache capability key is the secret key's, derived: the same secret key (every
// replica's) gives the same one, another secret key another.
func TestCacheCapabilityKeyIsDerived(t *testing.T) {
	key := NewKey()
	a, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(slices.Clone(key))
	c, _ := New(NewKey())
	if !a.CacheCapabilityKey().Equal(b.CacheCapabilityKey()) {
		t.Error("one secret key derives two cache capability keys")
	}
	if a.CacheCapabilityKey().Equal(c.CacheCapabilityKey()) {
		t.Error("two secret keys derive one cache capability key")
	}
}
