package registry

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// copyStore copies the store file of a closed registry's data directory into a new
// data directory: what a second replica of a shared store reads.
func copyStore(t *testing.T, from string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(from, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(to, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(to, store.FileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return to
}

// copyFile copies a file, mode 0600.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// putSecret seals a tenant's secret with r's secret key.
func putSecret(t *testing.T, r *Registry, value string) {
	t.Helper()
	err := r.st.Update(func(tx *store.Tx) error {
		if _, err := tx.CreateTenant("acme"); err != nil {
			return err
		}
		_, _, err := r.keys.box.PutTenant(tx, "acme", "secret://k8s/join", []byte(value))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// getSecret opens the tenant's secret with r's secret key.
func getSecret(r *Registry) (value []byte, err error) {
	err = r.st.View(func(tx *store.Tx) (err error) {
		value, err = r.keys.box.GetTenant(tx, "acme", "secret://k8s/join")
		return err
	})
	return value, err
}

// TestSealedKeysShareOneRegistry: with a KEK file the first start makes the file (0600)
// and seals the registry's keys into the store, none of them in the clear there or in
// DATA_DIR/pki; a second replica reading the same store with a copy of the file has the
// same keys: the same pins, agent CA and session keys, and it opens the secrets the
// first sealed.
func TestSealedKeysShareOneRegistry(t *testing.T) {
	dirA := filepath.Join(t.TempDir(), "a")
	kek := filepath.Join(t.TempDir(), "kek")
	a := newTestRegistry(t, Config{DataDir: dirA, KEKFile: kek})
	if st, err := os.Stat(kek); err != nil || st.Mode().Perm() != 0o600 || !a.Info().KEKMade {
		t.Fatalf("the KEK file: %v, want mode 0600 and Info saying it was made (%+v)", err, a.Info())
	}
	putSecret(t, a, "s3cret-value")
	pinsA, caA, endpointA := a.Info().Pins, a.keys.pki.AgentCAPEM, *a.keys.endpoint
	capA := a.keys.box.CacheCapabilityKey()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"serving-ca.key", "agent-ca.key", "join-signing.key", "join-encryption.key", "secrets.key"} {
		if _, err := os.Stat(filepath.Join(dirA, pki.Dir, name)); err == nil {
			t.Errorf("%s is in the data directory in the clear", name)
		}
	}
	db, err := os.ReadFile(filepath.Join(dirA, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	for what, secret := range map[string][]byte{"a PEM private key": []byte("PRIVATE KEY"), "the session ticket key": endpointA.SessionTickets[:],
		"the stateless reset key": endpointA.StatelessReset[:], "the tenant's secret": []byte("s3cret-value")} {
		if bytes.Contains(db, secret) {
			t.Errorf("the store holds %s in the clear", what)
		}
	}

	dirB := copyStore(t, dirA)
	kekB := filepath.Join(t.TempDir(), "kek")
	copyFile(t, kek, kekB)
	leftover := filepath.Join(dirB, ".admin.conf.tmp-314")
	copyFile(t, kek, leftover) // what a start killed while writing admin.conf left
	b := newTestRegistry(t, Config{DataDir: dirB, KEKFile: kekB})
	if b.Info().KEKMade {
		t.Errorf("the second replica says it made the KEK file it was given")
	}
	if _, err := os.Stat(leftover); err == nil {
		t.Errorf("a killed start's leftover is still in the data directory")
	}
	if !b.keys.box.CacheCapabilityKey().Equal(capA) {
		t.Errorf("the replicas sign cache capabilities with different keys")
	}
	if b.Info().Pins != pinsA || !bytes.Equal(b.keys.pki.AgentCAPEM, caA) || *b.keys.endpoint != endpointA {
		t.Errorf("the second replica has other keys: pins %+v, want %+v", b.Info().Pins, pinsA)
	}
	if got, err := getSecret(b); err != nil || string(got) != "s3cret-value" {
		t.Errorf("the second replica opens the first's secret as %q, %v", got, err)
	}
}

// TestSealedKeysRefusedWithoutTheirKEK: a replica of a store whose keys are sealed
// refuses to start, saying what to do, given another KEK, no KEK file where it names
// one, a KEK file others can read, or no KEK at all; it makes no key of its own.
func TestSealedKeysRefusedWithoutTheirKEK(t *testing.T) {
	dirA := filepath.Join(t.TempDir(), "a")
	kek := filepath.Join(t.TempDir(), "kek")
	a := newTestRegistry(t, Config{DataDir: dirA, KEKFile: kek})
	a.Close()
	other := filepath.Join(t.TempDir(), "other")
	if _, err := pki.CreateKEK(other); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(t.TempDir(), "kek-0644")
	copyFile(t, kek, open)
	os.Chmod(open, 0o644)
	missing := filepath.Join(t.TempDir(), "missing")
	for name, c := range map[string]struct {
		kekFile string
		want    string
	}{
		"another KEK":        {other, "copy the key-encryption key file of a registry that runs on this store"},
		"a missing file":     {missing, "does not exist: copy the key-encryption key file"},
		"a file others read": {open, "chmod 600"},
		"no --kek-file":      {"", "start with --kek-file"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := copyStore(t, dirA)
			_, err := New(Config{DataDir: dir, KEKFile: c.kekFile, Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0"})
			if proto.CodeOf(err) != proto.InvalidConfig || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v, want INVALID_CONFIG saying %q", err, c.want)
			}
			if pe, _ := err.(*proto.Error); pe == nil || pe.Details.Path != "--kek-file" {
				t.Errorf("the error names no --kek-file: %#v", err)
			}
			if _, err := os.Stat(missing); err == nil {
				t.Errorf("a KEK file was made for a store whose keys are sealed")
			}
			if entries, _ := os.ReadDir(filepath.Join(dir, pki.Dir)); len(entries) > 0 {
				t.Errorf("keys of its own were made: %v", entries)
			}
		})
	}
}

// TestAFirstStartRefusesAnothersFileAtKEKFile: the first start of a store, whose
// --kek-file names a file it did not make, reads that file as the KEK and refuses one that
// is not a KEK file INVALID_CONFIG at --kek-file, leaving it as it was and sealing nothing:
// a start with a KEK file of its own making then seals the keys.
func TestAFirstStartRefusesAnothersFileAtKEKFile(t *testing.T) {
	for name, c := range map[string]struct {
		content string
		want    string
	}{
		"another's notes": {"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI operator@host\n", "is not a key-encryption key"},
		"an empty file":   {"", "is not a key-encryption key"},
	} {
		t.Run(name, func(t *testing.T) {
			dir, kek := filepath.Join(t.TempDir(), "data"), filepath.Join(t.TempDir(), "kek")
			testkit.WriteFile(t, kek, []byte(c.content), 0o600)
			_, err := New(Config{DataDir: dir, KEKFile: kek, Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", Log: slog.New(slog.DiscardHandler)})
			if pe, _ := err.(*proto.Error); pe == nil || pe.Code != proto.InvalidConfig || pe.Details.Path != "--kek-file" || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %#v, want INVALID_CONFIG at --kek-file saying %q", err, c.want)
			}
			if got, err := os.ReadFile(kek); err != nil || string(got) != c.content {
				t.Errorf("the file at --kek-file is now %q, %v; want it left as it was", got, err)
			}
			if entries, _ := os.ReadDir(filepath.Dir(kek)); len(entries) != 1 {
				t.Errorf("beside the file at --kek-file: %v, want it alone", entries)
			}
			if entries, _ := os.ReadDir(filepath.Join(dir, pki.Dir)); len(entries) > 0 {
				t.Errorf("keys were written to the data directory: %v", entries)
			}
			own := filepath.Join(t.TempDir(), "kek")
			if r := newTestRegistry(t, Config{DataDir: dir, KEKFile: own}); !r.Info().KEKMade {
				t.Errorf("a start with a KEK file of its own making says it did not make it")
			}
		})
	}
}

// TestKEKSealsTheDataDirectorysKeys: a registry that ran without a KEK, started with
// one, seals the keys of its data directory: its pins stay, the secrets sealed before
// still open, and the agent endpoint's keys the store kept in the clear are gone.
func TestKEKSealsTheDataDirectorysKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	plain := newTestRegistry(t, Config{DataDir: dir})
	putSecret(t, plain, "kept")
	pins := plain.Info().Pins
	plain.Close()
	before := clearTicketKey(t, dir)

	sealed := newTestRegistry(t, Config{DataDir: dir, KEKFile: filepath.Join(t.TempDir(), "kek")})
	if sealed.Info().Pins != pins {
		t.Errorf("pins changed: %+v, want %+v", sealed.Info().Pins, pins)
	}
	if got, err := getSecret(sealed); err != nil || string(got) != "kept" {
		t.Errorf("the secret sealed before: %q, %v", got, err)
	}
	if sealed.keys.endpoint.SessionTickets == before {
		t.Errorf("the sealed session ticket key is the one the store held in the clear")
	}
	sealed.Close()
	if clearTicketKey(t, dir) == before {
		t.Errorf("the store still holds the session ticket key in the clear")
	}
}

// clearTicketKey is the session ticket key the store of a closed registry keeps in the
// clear: a new random one when it keeps none (AgentKey makes one, and the transaction
// is rolled back).
func clearTicketKey(t *testing.T, dir string) (key [32]byte) {
	t.Helper()
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rollback := errors.New("rollback")
	err = st.Update(func(tx *store.Tx) (err error) {
		if key, err = tx.AgentKey("agent-session-ticket-key"); err != nil {
			return err
		}
		return rollback
	})
	if err != rollback {
		t.Fatal(err)
	}
	return key
}

// TestALostSecretsKeyIsRefused: a registry without a KEK whose DATA_DIR/pki/secrets.key
// is lost, or replaced by another key, while its store holds secrets sealed with the
// key, refuses to start at --data-dir naming the file and what to do, and writes
// nothing: the data directory is byte for byte as it was, no key made, nor, with the
// rest of pki/ lost too, a PKI; nor, started with a KEK, does it make the KEK file or
// seal a key into the store. The key put back, it starts without a KEK (nothing was
// sealed) and opens them.
func TestALostSecretsKeyIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	a := newTestRegistry(t, Config{DataDir: dir})
	putSecret(t, a, "sealed-before")
	a.Close()
	pkiDir := filepath.Join(dir, pki.Dir)
	keyFile := filepath.Join(pkiDir, "secrets.key")
	backup := filepath.Join(t.TempDir(), "pki")
	testkit.CopyDir(t, pkiDir, backup)
	for name, replace := range map[string]func(){
		"lost":          func() { os.Remove(keyFile) },
		"lost with pki": func() { os.RemoveAll(pkiDir) },
		"replaced":      func() { os.WriteFile(keyFile, bytes.Repeat([]byte{7}, 32), 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			replace()
			defer func() {
				os.RemoveAll(pkiDir)
				testkit.CopyDir(t, backup, pkiDir)
			}()
			before := testkit.Tree(t, dir)
			r, err := New(Config{DataDir: dir, Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0"})
			if err == nil {
				_, opened := getSecret(r)
				r.Close()
				t.Fatalf("the registry started with another secrets key; the secret sealed before: %v", opened)
			}
			pe, _ := err.(*proto.Error)
			if pe == nil || pe.Code != proto.InvalidConfig || pe.Details.Path != "--data-dir" ||
				!strings.Contains(pe.Message, keyFile) || !strings.Contains(pe.Message, "from a backup") || !strings.Contains(pe.Message, "--secrets-key-lost") {
				t.Errorf("New: %#v, want INVALID_CONFIG at --data-dir naming %s, its backup and --secrets-key-lost", err, keyFile)
			}
			if diff := cmp.Diff(before, testkit.Tree(t, dir)); diff != "" {
				t.Errorf("the refused start changed the data directory (-before +after):\n%s", diff)
			}
			// Moving the data directory's keys into the store checks the key before it
			// seals it: sealed, it would be the store's for good.
			kek := filepath.Join(t.TempDir(), "kek")
			_, err = New(Config{DataDir: dir, Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", KEKFile: kek})
			if pe, _ := err.(*proto.Error); pe == nil || pe.Code != proto.InvalidConfig || pe.Details.Path != "--data-dir" || !strings.Contains(pe.Message, keyFile) {
				t.Errorf("New with a KEK, sealing the data directory's keys: %v, want INVALID_CONFIG at --data-dir naming %s", err, keyFile)
			}
			if _, err := os.Stat(kek); err == nil {
				t.Errorf("the refused start with a KEK made the KEK file")
			}
			if diff := cmp.Diff(before, testkit.Tree(t, dir)); diff != "" {
				t.Errorf("the refused start with a KEK changed the data directory (-before +after):\n%s", diff)
			}
		})
	}
	b := newTestRegistry(t, Config{DataDir: dir})
	if got, err := getSecret(b); err != nil || string(got) != "sealed-before" {
		t.Errorf("with the key put back, the secret opens as %q, %v", got, err)
	}
}

// forgetSecretsKey removes the store's record of its secrets key from the store of a
// closed registry: what a store from before the record holds, or one whose first start
// stopped after it wrote its key file and before it recorded the key.
func forgetSecretsKey(t *testing.T, dir string) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, store.FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("secrets_key")) }); err != nil {
		t.Fatal(err)
	}
}

// recordedID is the ID r's store records of key k.
func recordedID(t *testing.T, r *Registry, k store.RegistryKey) string {
	t.Helper()
	var id string
	if err := r.st.View(func(tx *store.Tx) (err error) { id, _, err = tx.KeyIDOf(k); return err }); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestASecretsKeyTheStoreDoesNotRecord: a start stopped between writing a new secrets
// key and recording it leaves a store that starts again and records the key; a store
// that records no key but holds secrets (one from before the record) takes the key that
// opens them and refuses another; a store without secrets takes a new key when its key
// is lost.
func TestASecretsKeyTheStoreDoesNotRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	a := newTestRegistry(t, Config{DataDir: dir})
	a.Close()
	forgetSecretsKey(t, dir)
	b := newTestRegistry(t, Config{DataDir: dir})
	if got := recordedID(t, b, store.SecretsKey); got != b.keys.box.ID() {
		t.Errorf("the store records key %q, want %s", got, b.keys.box.ID())
	}
	b.Close()

	keyFile := filepath.Join(dir, pki.Dir, "secrets.key")
	os.Remove(keyFile)
	c := newTestRegistry(t, Config{DataDir: dir})
	if c.keys.box.ID() == b.keys.box.ID() || recordedID(t, c, store.SecretsKey) != c.keys.box.ID() {
		t.Errorf("a store without secrets whose key is lost: key %s, recorded %s, want a new key recorded", c.keys.box.ID(), recordedID(t, c, store.SecretsKey))
	}
	putSecret(t, c, "sealed-before-the-record")
	c.Close()
	forgetSecretsKey(t, dir)
	saved, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(keyFile, bytes.Repeat([]byte{7}, 32), 0o600)
	_, err = New(Config{DataDir: dir, Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0"})
	if proto.CodeOf(err) != proto.InvalidConfig || !strings.Contains(err.Error(), "does not open with key") {
		t.Fatalf("another key for secrets the store records no key of: %v, want INVALID_CONFIG", err)
	}
	os.WriteFile(keyFile, saved, 0o600)
	d := newTestRegistry(t, Config{DataDir: dir})
	if got, err := getSecret(d); err != nil || string(got) != "sealed-before-the-record" || recordedID(t, d, store.SecretsKey) != d.keys.box.ID() {
		t.Errorf("the key that opens the store's secrets: %q, %v, recorded %q", got, err, recordedID(t, d, store.SecretsKey))
	}
}

// TestReplicasOnEtcdShareOneSecretsKey: replicas on etcd, each with a data directory of
// its own and a copy of the KEK file, have the one secrets key sealed in the store, and
// the store records its ID once: a replica whose data directory holds a secrets key of
// its own (one it ran with on bbolt) uses the store's, and opens the secret the first
// replica put.
func TestReplicasOnEtcdShareOneSecretsKey(t *testing.T) {
	sc := StoreConfig{Backend: "etcd", EtcdEndpoints: etcdtest.Shared(t).Endpoints, EtcdPrefix: etcdtest.Prefix(t)}
	kek := filepath.Join(t.TempDir(), "kek")
	a := newTestRegistry(t, Config{Store: sc, KEKFile: kek})
	putSecret(t, a, "one-key")
	dirB := filepath.Join(t.TempDir(), "b")
	if err := secret.WriteKey(filepath.Join(dirB, pki.Dir), secret.NewKey()); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dirB, 0o700)
	kekB := filepath.Join(t.TempDir(), "kek")
	copyFile(t, kek, kekB)
	b := newTestRegistry(t, Config{Store: sc, DataDir: dirB, KEKFile: kekB})
	if b.keys.box.ID() != a.keys.box.ID() || recordedID(t, b, store.SecretsKey) != a.keys.box.ID() {
		t.Errorf("replica b has key %s, the store records %q, want replica a's %s", b.keys.box.ID(), recordedID(t, b, store.SecretsKey), a.keys.box.ID())
	}
	if got, err := getSecret(b); err != nil || string(got) != "one-key" {
		t.Errorf("replica b opens replica a's secret as %q, %v", got, err)
	}
}

// TestALostPKIIsRefused: a registry without a KEK whose PKI files (DATA_DIR/pki's CAs and
// join keys) are lost, or replaced, while its store holds a join token or an agent's
// join, which depend on them, refuses to start at --data-dir naming the files, their
// backup and --pki-lost, and writes nothing: the data directory is byte for byte as it
// was. The files put back, it starts with the pins it had; lost for good, PKILost starts
// it with a new PKI, which the store records, and the next start needs the flag no more.
// A store holding neither takes a new PKI when its PKI is lost.
func TestALostPKIIsRefused(t *testing.T) {
	for name, depend := range map[string]func(tx *store.Tx) error{
		"a join token": func(tx *store.Tx) error {
			_, _, err := tx.CreateJoinToken(store.TokenFor{Kind: store.TokenRamdisk, NodeID: "n1"}, tx.Now().Add(time.Hour))
			return err
		},
		"an agent's join": func(tx *store.Tx) error {
			_, err := tx.RecordAgentJoin("n1", string(proto.RoleNode), store.Holder{}, time.Time{}, "")
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			a := newTestRegistry(t, Config{DataDir: dir})
			a.Close()
			os.RemoveAll(filepath.Join(dir, pki.Dir))
			b := newTestRegistry(t, Config{DataDir: dir})
			if b.Info().Pins == a.Info().Pins {
				t.Fatalf("a new PKI has the pins of the lost one")
			}
			if err := b.st.Update(depend); err != nil {
				t.Fatal(err)
			}
			pins := b.Info().Pins
			b.Close()
			pkiDir := filepath.Join(dir, pki.Dir)
			backup := filepath.Join(t.TempDir(), "pki")
			testkit.CopyDir(t, pkiDir, backup)
			for what, change := range map[string]func() []string{
				"the serving CA gone": func() []string {
					os.Remove(filepath.Join(pkiDir, "serving-ca.key"))
					os.Remove(filepath.Join(pkiDir, "serving-ca.crt"))
					return []string{filepath.Join(pkiDir, "serving-ca.key"), filepath.Join(pkiDir, "serving-ca.crt")}
				},
				"pki/ gone": func() []string {
					os.RemoveAll(pkiDir)
					return []string{filepath.Join(pkiDir, "agent-ca.crt"), filepath.Join(pkiDir, "join-encryption.key")}
				},
				"the join signing key replaced": func() []string {
					other := t.TempDir()
					if _, err := pki.LoadOrCreate(other, clock.Real{}); err != nil {
						t.Fatal(err)
					}
					copyFile(t, filepath.Join(other, pki.Dir, "join-signing.key"), filepath.Join(pkiDir, "join-signing.key"))
					return []string{pkiDir + " is not", "replaced"}
				},
			} {
				t.Run(what, func(t *testing.T) {
					named := change()
					before := testkit.Tree(t, dir)
					_, err := New(Config{DataDir: dir, Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0"})
					pe, _ := err.(*proto.Error)
					if pe == nil || pe.Code != proto.InvalidConfig || pe.Details.Path != "--data-dir" ||
						!strings.Contains(pe.Message, "from a backup") || !strings.Contains(pe.Message, "--pki-lost") {
						t.Fatalf("New: %#v, want INVALID_CONFIG at --data-dir naming the files, their backup and --pki-lost", err)
					}
					for _, n := range named {
						if !strings.Contains(pe.Message, n) {
							t.Errorf("the refusal does not name %s: %s", n, pe.Message)
						}
					}
					if diff := cmp.Diff(before, testkit.Tree(t, dir)); diff != "" {
						t.Errorf("the refused start changed the data directory (-before +after):\n%s", diff)
					}
					os.RemoveAll(pkiDir)
					testkit.CopyDir(t, backup, pkiDir)
				})
			}
			c := newTestRegistry(t, Config{DataDir: dir})
			if c.Info().Pins != pins {
				t.Errorf("with pki/ put back, pins %+v, want %+v", c.Info().Pins, pins)
			}
			c.Close()

			os.RemoveAll(pkiDir)
			d := newTestRegistry(t, Config{DataDir: dir, PKILost: true})
			if d.Info().Pins == pins || recordedID(t, d, store.PKIKey) != d.keys.pki.ID() {
				t.Errorf("PKILost: pins %+v (lost: %+v), the store records %q, want the new PKI's %s", d.Info().Pins, pins, recordedID(t, d, store.PKIKey), d.keys.pki.ID())
			}
			d.Close()
			newTestRegistry(t, Config{DataDir: dir}).Close()
		})
	}
}

// TestALostSecretsKeySealedOnce: a registry that ran without a KEK, whose secrets key is
// lost for good, started with a KEK and SecretsKeyLost seals the key it has, checks it
// once, before it seals it, and says so once (before, it checked the key again once
// sealed, and warned twice); the store records the key, and the next start with the KEK
// needs the flag no more.
func TestALostSecretsKeySealedOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	a := newTestRegistry(t, Config{DataDir: dir})
	putSecret(t, a, "sealed-with-the-lost-key")
	a.Close()
	testkit.WriteFile(t, filepath.Join(dir, pki.Dir, secret.KeyFile), bytes.Repeat([]byte{7}, 32), 0o600)
	kek := filepath.Join(t.TempDir(), "kek")
	var logged testkit.SyncBuffer
	b := newTestRegistry(t, Config{DataDir: dir, KEKFile: kek, SecretsKeyLost: true, Log: slog.New(slog.NewTextHandler(&logged, nil))})
	if n := strings.Count(logged.String(), "--secrets-key-lost: "); n != 1 {
		t.Errorf("the start with SecretsKeyLost warned of the lost key %d times, want once:\n%s", n, logged.String())
	}
	if recordedID(t, b, store.SecretsKey) != b.keys.box.ID() {
		t.Errorf("the store records key %q, want the sealed %s", recordedID(t, b, store.SecretsKey), b.keys.box.ID())
	}
	b.Close()
	newTestRegistry(t, Config{DataDir: dir, KEKFile: kek}).Close()
}
