package pki

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
)

// TestSealOpen: sealed keys open with their KEK to the same keys, and not with another
// KEK or once a byte of them changed.
func TestSealOpen(t *testing.T) {
	dir := t.TempDir()
	kek, err := CreateKEK(filepath.Join(dir, "kek"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Generate(clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Seal(kek, p, map[string][]byte{"secrets": bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(s.Ciphertext, p.ServingCAPEM[30:60]) || bytes.Contains(s.Ciphertext, []byte("PRIVATE KEY")) {
		t.Errorf("the sealed keys hold PEM in the clear")
	}
	loaded, err := LoadKEK(filepath.Join(dir, "kek"))
	if err != nil || loaded.ID() != kek.ID() {
		t.Fatalf("LoadKEK: %v, %v", loaded, err)
	}
	opened, named, err := Open(loaded, s, clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	if opened.Pins() != p.Pins() || !bytes.Equal(opened.AgentCAPEM, p.AgentCAPEM) || !bytes.Equal(named["secrets"], bytes.Repeat([]byte{7}, 32)) {
		t.Errorf("opened other keys than were sealed")
	}
	if _, err := opened.IssueAgentCertificate(proto.AgentCredential{Node: "nd_1", Role: proto.RoleNode}, p.JoinSigningKey()); err != nil {
		t.Errorf("the opened agent CA does not issue: %v", err)
	}

	other, err := CreateKEK(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(other, s, clock.Real{}); err == nil || !strings.Contains(err.Error(), kek.ID()) {
		t.Errorf("another KEK: %v, want an error naming %s", err, kek.ID())
	}
	// Another KEK that claims the ID of the right one still opens nothing.
	other.id = kek.ID()
	if _, _, err := Open(other, s, clock.Real{}); err == nil {
		t.Errorf("another KEK under the right ID opened the keys")
	}
	tampered := Sealed{KEK: s.KEK, Ciphertext: bytes.Clone(s.Ciphertext)}
	tampered.Ciphertext[len(tampered.Ciphertext)/2] ^= 1
	if _, _, err := Open(kek, tampered, clock.Real{}); err == nil {
		t.Errorf("changed sealed keys opened")
	}
	if _, err := CreateKEK(filepath.Join(dir, "kek")); err == nil {
		t.Errorf("CreateKEK replaced an existing KEK file")
	}
}

// TestLoadOrCreateKEKMadeOnce: starts that find no KEK file at once all make it or read
// it: exactly one says it made the file (mode 0600), the others read the file it made, and
// none fails. A file another made after the read found none is no one else's to claim.
// Before, a start decided it had made the file from a stat of its own before it read, and
// one whose write found the file made meanwhile failed ("file exists").
func TestLoadOrCreateKEKMadeOnce(t *testing.T) {
	const rounds, starts = 20, 8
	for round := range rounds {
		path := filepath.Join(t.TempDir(), "kek")
		var wg sync.WaitGroup
		keks, created, errs := make([]*KEK, starts), make([]bool, starts), make([]error, starts)
		for i := range starts {
			wg.Go(func() { keks[i], created[i], errs[i] = LoadOrCreateKEK(path, true) })
		}
		wg.Wait()
		made := 0
		for i := range starts {
			if errs[i] != nil {
				t.Fatalf("round %d, start %d: %v", round, i, errs[i])
			}
			if created[i] {
				made++
			}
			if keks[i].ID() != keks[0].ID() {
				t.Errorf("round %d: start %d has KEK %s, start 0 %s", round, i, keks[i].ID(), keks[0].ID())
			}
		}
		if made != 1 {
			t.Errorf("round %d: %d starts say they made the KEK file, want 1", round, made)
		}
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("round %d: the KEK file: %v, %v, want mode 0600", round, st, err)
		}
	}
	if _, created, err := LoadOrCreateKEK(filepath.Join(t.TempDir(), "missing"), false); !errors.Is(err, fs.ErrNotExist) || created {
		t.Errorf("no KEK file, not to be made: %v, created %v; want it not to exist", err, created)
	}
}

// TestLoadKEKOpensOnce: the KEK file is checked and read through one open: a FIFO at its
// path is refused as no regular file rather than waited on for a writer, and a KEK file
// is read as it was checked.
func TestLoadKEKOpensOnce(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "kek")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKEK(fifo); err == nil || !strings.Contains(err.Error(), "is not a regular file") {
		t.Errorf("a FIFO: %v, want it refused as no regular file", err)
	}
	if _, created, err := LoadOrCreateKEK(fifo, true); err == nil || created {
		t.Errorf("a FIFO where a KEK file is to be made: %v, created %v; want it refused", err, created)
	}
}

// FuzzLoadKEK: a KEK file the operator gives is read without panicking, and accepted
// only as one line of the prefix and 64 hex digits.
func FuzzLoadKEK(f *testing.F) {
	f.Add([]byte(kekPrefix + strings.Repeat("ab", 32) + "\n"))
	f.Add([]byte(kekPrefix + strings.Repeat("ab", 31)))
	f.Add([]byte(strings.Repeat("ab", 32)))
	f.Add([]byte{})
	path := filepath.Join(f.TempDir(), "kek")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		k, err := LoadKEK(path)
		if err == nil && (k == nil || !strings.HasPrefix(strings.TrimSpace(string(data)), kekPrefix) || len(strings.TrimSpace(string(data))) != len(kekPrefix)+64) {
			t.Errorf("accepted %q", data)
		}
	})
}

// TestOpensKeysSealedBefore: registry keys sealed by an earlier build (testdata, with the
// KEK file beside them) still open with that KEK to the same PKI (its pins) and named
// keys: the sealed format has not changed.
func TestOpensKeysSealedBefore(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "sealed-keys-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Sealed Sealed
		Pins   json.RawMessage
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	kekFile, err := os.ReadFile(filepath.Join("testdata", "kek-v1"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kek")
	if err := os.WriteFile(path, kekFile, 0o600); err != nil {
		t.Fatal(err)
	}
	kek, err := LoadKEK(path)
	if err != nil {
		t.Fatal(err)
	}
	if kek.ID() != golden.Sealed.KEK {
		t.Fatalf("the KEK's ID is %s, the sealed keys name %s", kek.ID(), golden.Sealed.KEK)
	}
	p, named, err := Open(kek, golden.Sealed, clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	pins, err := json.Marshal(p.Pins())
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	json.Unmarshal(golden.Pins, &want)
	json.Unmarshal(pins, &got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("opened pins %s, sealed %s", pins, golden.Pins)
	}
	if string(named["secrets"]) != "0123456789abcdef0123456789abcdef" {
		t.Errorf("the named key opened as %q", named["secrets"])
	}
}
