package registry

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
)

// keys are the registry's keys: its PKI, the secret box, and the agent endpoint's own
// keys (nil when the endpoint keeps them in the store, as without a KEK). kekMade is set
// when this start made the KEK file.
type keys struct {
	pki      *pki.PKI
	box      *secret.Box
	endpoint *agents.Keys
	kekMade  bool
}

// The names of the keys sealed beside the PKI.
const (
	sealedSecrets        = "secrets"
	sealedStatelessReset = "agent-stateless-reset"
	sealedSessionTickets = "agent-session-tickets"
)

// loadKeys loads the registry's keys. Without cfg.KEKFile they are files in
// DATA_DIR/pki, made on first start. With it they are sealed in the store with the KEK
// that file holds: the first replica to start makes the KEK file (when it does not
// exist) and seals the keys (those DATA_DIR/pki holds, when it holds a serving CA, so
// the pins stay; else new ones), and every replica opens them from the store. A replica
// whose KEK file is missing or another than the one the keys were sealed with refuses to
// start, and so does a registry without a KEK file on a store that holds sealed keys.
func loadKeys(cfg Config, st *store.Store) (keys, error) {
	var sealed store.SealedKeys
	var have bool
	if err := st.View(func(tx *store.Tx) (err error) { sealed, have, err = tx.SealedKeys(); return err }); err != nil {
		return keys{}, err
	}
	if cfg.KEKFile == "" {
		if have {
			return keys{}, proto.Errorf(proto.InvalidConfig, "the store holds the registry's keys sealed with key-encryption key %s: start with --kek-file naming a copy of that key's file", sealed.KEK).WithPath("--kek-file")
		}
		p, err := pki.LoadOrCreate(cfg.DataDir, cfg.Clock)
		if err != nil {
			return keys{}, fmt.Errorf("registry PKI: %w", err)
		}
		key, made, err := readSecretsKey(cfg)
		if err != nil {
			return keys{}, err
		}
		box, err := secret.New(key)
		if err != nil {
			return keys{}, err
		}
		where := secretsKeyFile(cfg)
		return keys{pki: p, box: box}, bindSecretsKey(cfg, st, box, where, made, func() error {
			if made {
				return secret.WriteKey(filepath.Join(cfg.DataDir, pki.Dir), key)
			}
			return nil
		})
	}
	_, statErr := os.Stat(cfg.KEKFile)
	created := !have && errors.Is(statErr, fs.ErrNotExist)
	// What a start killed while writing left in DATA_DIR (pki.LoadOrCreate does it
	// without a KEK).
	if _, err := fsutil.RemoveTemps(cfg.DataDir); err != nil {
		return keys{}, fmt.Errorf("remove what an interrupted write left in %s: %w", cfg.DataDir, err)
	}
	kek, err := pki.LoadOrCreateKEK(cfg.KEKFile, !have)
	if errors.Is(err, fs.ErrNotExist) {
		return keys{}, proto.Errorf(proto.InvalidConfig, "the store holds the registry's keys sealed with key-encryption key %s, and %s does not exist: copy the key-encryption key file of a registry that runs on this store there (mode 0600)", sealed.KEK, cfg.KEKFile).WithPath("--kek-file")
	}
	if err != nil {
		return keys{}, proto.Errorf(proto.InvalidConfig, "%v", err).WithPath("--kek-file")
	}
	// What a start killed while writing the KEK file left beside it: the KEK file's
	// directory may be no one's but the operator's, so only the file's own temporaries
	// go, and only now it exists (another start writing it could no longer link its own).
	if _, err := fsutil.RemoveTempsOf(cfg.KEKFile); err != nil {
		return keys{}, fmt.Errorf("remove what an interrupted write left beside %s: %w", cfg.KEKFile, err)
	}
	if !have {
		if sealed, err = sealNewKeys(cfg, st, kek); err != nil {
			return keys{}, err
		}
	}
	p, named, err := pki.Open(kek, pki.Sealed{KEK: sealed.KEK, Ciphertext: sealed.Ciphertext}, cfg.Clock)
	if err != nil {
		if created && sealed.KEK != kek.ID() {
			// Another replica sealed its keys first, with its own new KEK: the one this
			// start made opens nothing.
			os.Remove(cfg.KEKFile)
		}
		return keys{}, proto.Errorf(proto.InvalidConfig, "%v", err).WithPath("--kek-file")
	}
	k := keys{pki: p, endpoint: &agents.Keys{}, kekMade: created}
	for name, to := range map[string][]byte{sealedStatelessReset: k.endpoint.StatelessReset[:], sealedSessionTickets: k.endpoint.SessionTickets[:]} {
		if len(named[name]) != len(to) {
			return keys{}, fmt.Errorf("the store's sealed keys hold no %s key", name)
		}
		copy(to, named[name])
	}
	if k.box, err = secret.New(named[sealedSecrets]); err != nil {
		return keys{}, fmt.Errorf("the store's sealed keys: %w", err)
	}
	if err := bindSecretsKey(cfg, st, k.box, "the secrets key sealed in the store", false, nil); err != nil {
		return keys{}, err
	}
	return k, p.WritePins(cfg.DataDir)
}

// sealNewKeys seals the registry's keys with kek into the store, unless another replica
// sealed its own first, and returns what the store holds. The keys are those of
// DATA_DIR/pki when it holds a serving CA (a registry moving to sealed keys keeps its
// pins and its secrets), else new ones; the agent endpoint's keys are always new, since
// the ones the store kept were in the clear.
func sealNewKeys(cfg Config, st *store.Store, kek *pki.KEK) (store.SealedKeys, error) {
	var p *pki.PKI
	var secretsKey []byte
	var err error
	pkiDir := filepath.Join(cfg.DataDir, pki.Dir)
	if _, statErr := os.Stat(filepath.Join(pkiDir, "serving-ca.crt")); statErr == nil {
		if p, err = pki.LoadOrCreate(cfg.DataDir, cfg.Clock); err != nil {
			return store.SealedKeys{}, fmt.Errorf("registry PKI: %w", err)
		}
		made := false
		if secretsKey, made, err = readSecretsKey(cfg); err != nil {
			return store.SealedKeys{}, err
		}
		// Checked before it is sealed: sealed, it would be the store's for good.
		box, err := secret.New(secretsKey)
		if err != nil {
			return store.SealedKeys{}, err
		}
		if _, err := checkSecretsKey(cfg, st, box, secretsKeyFile(cfg), made); err != nil {
			return store.SealedKeys{}, err
		}
		cfg.Log.Info("the registry's keys in the data directory are sealed into the store; remove them from there once they are backed up", "dir", pkiDir)
	} else {
		if p, err = pki.Generate(cfg.Clock); err != nil {
			return store.SealedKeys{}, err
		}
		secretsKey = secret.NewKey()
	}
	named := map[string][]byte{sealedSecrets: secretsKey, sealedStatelessReset: make([]byte, 32), sealedSessionTickets: make([]byte, 32)}
	rand.Read(named[sealedStatelessReset])
	rand.Read(named[sealedSessionTickets])
	s, err := pki.Seal(kek, p, named)
	if err != nil {
		return store.SealedKeys{}, err
	}
	rec := store.SealedKeys{KEK: s.KEK, Ciphertext: s.Ciphertext}
	err = st.Update(func(tx *store.Tx) error { return tx.PutSealedKeys(rec) })
	if proto.CodeOf(err) == proto.Conflict {
		err = st.View(func(tx *store.Tx) (err error) { rec, _, err = tx.SealedKeys(); return err })
	}
	return rec, err
}

// secretsKeyFile is where a registry without KEK keeps its secrets key.
func secretsKeyFile(cfg Config) string {
	return filepath.Join(cfg.DataDir, pki.Dir, secret.KeyFile)
}

// readSecretsKey reads the secrets key of DATA_DIR/pki; a new one (made), not written,
// when there is none.
func readSecretsKey(cfg Config) (key []byte, made bool, err error) {
	key, err = secret.ReadKey(filepath.Join(cfg.DataDir, pki.Dir))
	if errors.Is(err, fs.ErrNotExist) {
		return secret.NewKey(), true, nil
	}
	return key, false, err
}

// checkSecretsKey refuses box's key, read from where (made: there was none, and it is
// new), when the store holds secrets sealed with another key: a registry with it would
// open none of them, and would seal new ones beside them with another key. With
// cfg.SecretsKeyLost it takes it, and says that the key before is lost.
func checkSecretsKey(cfg Config, st *store.Store, box *secret.Box, where string, made bool) (lost bool, err error) {
	err = st.View(box.Check)
	if !errors.Is(err, secret.ErrOtherKey) {
		return false, err
	}
	if cfg.SecretsKeyLost {
		cfg.Log.Warn("--secrets-key-lost: the store's secrets sealed with the lost key never open again; the store records this key from now on", "file", where, "detail", err.Error())
		return true, nil
	}
	what := where + " is not the key the store's secrets are sealed with: it was replaced since they were sealed"
	if made {
		what = where + ", the key the store's secrets are sealed with, is gone"
	}
	path, restore := "--data-dir", "Restore it from a backup of the data directory and start again"
	if where != secretsKeyFile(cfg) {
		path, restore = "--kek-file", "Restore the store from a backup"
	}
	return false, proto.Errorf(proto.InvalidConfig, "%s; a registry with this key would open none of them (%v). %s; "+
		"or, when no copy of the key is left, start once with --secrets-key-lost: the secrets sealed with the lost key then never open, "+
		"each tenant puts its secrets again (secrets put), and a node's user data is rendered anew at its next deploy", what, err, restore).WithPath(path)
}

// bindSecretsKey makes box's key, read from where, the one the store's secrets are
// sealed with (checkSecretsKey), and records its ID in the store. write, when set,
// writes the key where it is kept first: a start stopped between the two finds the key
// and a store that records none, and records it then.
func bindSecretsKey(cfg Config, st *store.Store, box *secret.Box, where string, made bool, write func() error) error {
	lost, err := checkSecretsKey(cfg, st, box, where, made)
	if err != nil {
		return err
	}
	if write != nil {
		if err := write(); err != nil {
			return err
		}
	}
	var replaced string
	if err := st.Update(func(tx *store.Tx) (err error) { replaced, err = box.Bind(tx, lost); return err }); err != nil {
		return err
	}
	if replaced != "" && !lost {
		cfg.Log.Info("the store holds no secret; it records the secrets key from now on", "key", box.ID(), "before", replaced, "file", where)
	}
	if cfg.SecretsKeyLost && !lost {
		cfg.Log.Warn("--secrets-key-lost is given and the key is the store's: remove the flag, or a later loss of the key starts unnoticed", "file", where)
	}
	return nil
}
