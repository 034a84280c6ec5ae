package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// rotationHost is a registry's store with its API served on the host channel, as
// `serve` serves the admin socket, and the admin.conf a rotation writes.
type rotationHost struct {
	dir, conf string
	st        *store.Store
	srv       *httptest.Server
}

// startRotationHost opens (or reopens, as a restart does) the store in dir and serves its
// API to the host; write, when set, replaces the writing of the admin config.
func startRotationHost(t *testing.T, dir string, write func(path, credential string) error) *rotationHost {
	t.Helper()
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return serveRotation(t, st, dir, write)
}

// serveRotation serves st's API to the host, the admin config in dir.
func serveRotation(t *testing.T, st *store.Store, dir string, write func(path, credential string) error) *rotationHost {
	h := &rotationHost{dir: dir, conf: filepath.Join(dir, "admin.conf"), st: st}
	if write == nil {
		write = writeAdminConf
	}
	s := NewServer(st, slog.New(slog.DiscardHandler))
	s.RegisterAll()
	s.RegisterAdminRotation(AdminConfigWriter{Path: h.conf, Write: func(c string) error { return write(h.conf, c) }})
	h.srv = httptest.NewServer(s.HostHandler())
	t.Cleanup(func() { h.srv.Close(); st.Close() })
	return h
}

func writeAdminConf(path, credential string) error {
	return WriteClientConfig(path, ClientConfig{Server: "https://127.0.0.1:7443", ServingCA: "-", Credential: credential})
}

// rotate calls credentials.rotateAdmin on the host channel.
func (h *rotationHost) rotate(t *testing.T) (RotatedAdmin, *proto.Error) {
	t.Helper()
	resp, err := http.Post(h.srv.URL+"/v1/credentials.rotateAdmin", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out RotatedAdmin
	if resp.StatusCode != http.StatusOK {
		var e proto.Error
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("answer %s: %v", body, err)
		}
		return out, &e
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return out, nil
}

// fileCredential is the credential the admin.conf holds.
func (h *rotationHost) fileCredential(t *testing.T) string {
	t.Helper()
	cfg, err := LoadClientConfig(h.conf)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Credential
}

// works reports whether bearer authenticates, and if not why.
func (h *rotationHost) works(bearer string) error {
	return h.st.View(func(tx *store.Tx) error { _, err := tx.Authenticate(bearer); return err })
}

// admins are the ids of the usable credentials holding `*`.
func (h *rotationHost) admins(t *testing.T) []string {
	t.Helper()
	var ids []string
	storetest.Update(t, h.st, func(tx *store.Tx) error {
		creds, err := tx.UsableHolding(store.RootTenant, ActionAll)
		for _, c := range creds {
			ids = append(ids, c.ID)
		}
		return err
	})
	return ids
}

// firstStart makes the root tenant and its admin credential, written to admin.conf, as a
// registry's first start does.
func firstStart(t *testing.T, dir string) (id, bearer string) {
	t.Helper()
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	storetest.Update(t, st, func(tx *store.Tx) error {
		if _, err := tx.CreateTenant(store.RootTenant); err != nil {
			return err
		}
		c, b, err := tx.CreateCredential(store.RootTenant, []string{ActionAll}, time.Time{})
		id, bearer = c.ID, b
		return err
	})
	if err := writeAdminConf(filepath.Join(dir, "admin.conf"), bearer); err != nil {
		t.Fatal(err)
	}
	return id, bearer
}

// TestRotateAdminNeverLeavesTheHostWithoutAWorkingAdmin fails each step of a rotation in
// turn, and leaves a credential behind as a registry that died between the steps would:
// after each, admin.conf holds a working admin credential, the error says what was left
// and what to do, and the next rotation leaves exactly one working admin credential, the
// file's.
func TestRotateAdminNeverLeavesTheHostWithoutAWorkingAdmin(t *testing.T) {
	t.Run("rotated", func(t *testing.T) {
		dir := t.TempDir()
		oldID, old := firstStart(t, dir)
		h := startRotationHost(t, dir, nil)
		got, e := h.rotate(t)
		if e != nil {
			t.Fatal(e)
		}
		if len(got.Revoked) != 1 || got.Revoked[0].ID != oldID || got.Revoked[0].RevokedAt.IsZero() || got.Config != h.conf {
			t.Errorf("rotation answered %+v", got)
		}
		if err := h.works(old); proto.CodeOf(err) != proto.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
			t.Errorf("the old credential after the rotation: %v", err)
		}
		if err := h.works(h.fileCredential(t)); err != nil {
			t.Errorf("the new admin.conf: %v", err)
		}
		if ids := h.admins(t); len(ids) != 1 || ids[0] != got.Admin.ID {
			t.Errorf("working admin credentials %v, want only %s", ids, got.Admin.ID)
		}
		if st, err := os.Stat(h.conf); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("admin.conf: %v, mode %v", err, st.Mode().Perm())
		}
		raw, _ := json.Marshal(got)
		if bytes.Contains(raw, []byte(h.fileCredential(t))) {
			t.Errorf("the answer shows the new secret: %s", raw)
		}
	})

	t.Run("the file cannot be written", func(t *testing.T) {
		dir := t.TempDir()
		oldID, old := firstStart(t, dir)
		before, _ := os.ReadFile(filepath.Join(dir, "admin.conf"))
		h := startRotationHost(t, dir, func(string, string) error { return errors.New("no space left on device") })
		_, e := h.rotate(t)
		if e == nil || e.Details.Reason != proto.ReasonConfigNotWritten || !strings.Contains(e.Message, "still works") || !strings.Contains(e.Message, "no space left") {
			t.Fatalf("rotation with a file it cannot write: %+v", e)
		}
		if after, _ := os.ReadFile(h.conf); !bytes.Equal(after, before) {
			t.Errorf("admin.conf changed")
		}
		if err := h.works(old); err != nil {
			t.Errorf("the old admin credential: %v", err)
		}
		if ids := h.admins(t); len(ids) != 1 || ids[0] != oldID {
			t.Errorf("working admin credentials %v, want only the old %s: the one made for the file must not outlive it", ids, oldID)
		}
	})

	t.Run("the revocation fails after the file is written", func(t *testing.T) {
		dir := t.TempDir()
		oldID, old := firstStart(t, dir)
		var st *store.Store
		h := startRotationHost(t, dir, func(path, c string) error {
			err := writeAdminConf(path, c)
			st.Close() // the store goes away between the file and the revocation
			return err
		})
		st = h.st
		_, e := h.rotate(t)
		if e == nil || e.Details.Reason != proto.ReasonOldNotRevoked || !strings.Contains(e.Message, oldID) || !strings.Contains(e.Message, "rotate-admin") {
			t.Fatalf("rotation whose revocation failed: %+v, want it to name %s and say to rotate again", e, oldID)
		}
		// The registry starts again on its store: the new file works, the old credential
		// still does, and a second rotation revokes both.
		h.srv.Close()
		h = startRotationHost(t, dir, nil)
		written := h.fileCredential(t)
		if err := h.works(written); err != nil {
			t.Fatalf("admin.conf after the failed revocation: %v", err)
		}
		if err := h.works(old); err != nil {
			t.Errorf("the old credential, not revoked: %v", err)
		}
		got, e := h.rotate(t)
		if e != nil {
			t.Fatal(e)
		}
		if len(got.Revoked) != 2 {
			t.Errorf("the second rotation revoked %+v, want the old one and the one the failed rotation wrote", got.Revoked)
		}
		for _, b := range []string{old, written} {
			if err := h.works(b); proto.CodeOf(err) != proto.Unauthenticated {
				t.Errorf("a replaced admin credential still works: %v", err)
			}
		}
		if ids := h.admins(t); len(ids) != 1 || ids[0] != got.Admin.ID {
			t.Errorf("working admin credentials %v, want only %s", ids, got.Admin.ID)
		}
	})

	t.Run("a death before the file is written", func(t *testing.T) {
		dir := t.TempDir()
		_, old := firstStart(t, dir)
		h := startRotationHost(t, dir, nil)
		// What the first transaction of a rotation left: a new admin credential that no
		// file holds.
		var strayID string
		storetest.Update(t, h.st, func(tx *store.Tx) error {
			c, _, err := tx.CreateCredential(store.RootTenant, []string{ActionAll}, time.Time{})
			strayID = c.ID
			return err
		})
		if err := h.works(old); err != nil {
			t.Fatalf("admin.conf after the death: %v", err)
		}
		got, e := h.rotate(t)
		if e != nil {
			t.Fatal(e)
		}
		if len(got.Revoked) != 2 {
			t.Errorf("revoked %+v, want the old credential and %s", got.Revoked, strayID)
		}
		if ids := h.admins(t); len(ids) != 1 || ids[0] != got.Admin.ID {
			t.Errorf("working admin credentials %v, want only %s", ids, got.Admin.ID)
		}
	})
}

// TestConcurrentRotationsLeaveOneWorkingAdmin rotates through two registries on one etcd
// store at the same moment, round after round: each round leaves exactly one working
// admin credential, held by one of the two files, and a rotation told that the other
// replaced it holds a refused one.
func TestConcurrentRotationsLeaveOneWorkingAdmin(t *testing.T) {
	cluster := etcdtest.Start(t)
	cfg := store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t)}
	var hosts [2]*rotationHost
	for i := range hosts {
		st, err := store.OpenEtcd(cfg, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = serveRotation(t, st, t.TempDir(), nil)
	}
	storetest.Update(t, hosts[0].st, func(tx *store.Tx) error {
		if _, err := tx.CreateTenant(store.RootTenant); err != nil {
			return err
		}
		_, _, err := tx.CreateCredential(store.RootTenant, []string{ActionAll}, time.Time{})
		return err
	})
	for round := range 8 {
		var errs [2]*proto.Error
		var wg sync.WaitGroup
		for i, h := range hosts {
			wg.Go(func() { _, errs[i] = h.rotate(t) })
		}
		wg.Wait()
		var working []string
		for i, h := range hosts {
			if errs[i] != nil && errs[i].Details.Reason != proto.ReasonRotatedElsewhere {
				t.Fatalf("round %d, registry %d: %+v", round, i, errs[i])
			}
			err := h.works(h.fileCredential(t))
			switch {
			case err == nil:
				working = append(working, h.conf)
			case errs[i] != nil && proto.CodeOf(err) != proto.Unauthenticated:
				t.Errorf("round %d: registry %d was told another rotation replaced its file's credential, which is %v", round, i, err)
			}
		}
		if ids := hosts[0].admins(t); len(ids) != 1 || len(working) != 1 {
			t.Fatalf("round %d: working admin credentials %v, files holding one %v; want exactly one of each", round, ids, working)
		}
	}
}
