package registry

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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
// Either way the PKI and the secrets key are checked against the IDs the store records
// of them (checkKeys) before anything is written, and recorded (bindKeys).
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
		return loadDataDirKeys(cfg, st)
	}
	// The keys this start seals when the store holds none, checked before anything is
	// written.
	var fresh toSeal
	if !have {
		var err error
		if fresh, err = keysToSeal(cfg, st); err != nil {
			return keys{}, err
		}
	}
	// What a start killed while writing left in DATA_DIR (pki.Write does it without a
	// KEK).
	if _, err := fsutil.RemoveTemps(cfg.DataDir); err != nil {
		return keys{}, fmt.Errorf("remove what an interrupted write left in %s: %w", cfg.DataDir, err)
	}
	kek, created, err := pki.LoadOrCreateKEK(cfg.KEKFile, !have)
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
	// The keys this start sealed, checked before it sealed them.
	var checked []recordedKey
	if !have {
		if sealed, checked, err = fresh.seal(st, kek); err != nil {
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
	if checked == nil {
		checked = []recordedKey{pkiKey(cfg, p, "the PKI sealed in the store", false), secretsKey(cfg, k.box, "the secrets key sealed in the store", false)}
		for i := range checked {
			checked[i].sealed = true
		}
		if err := checkKeys(cfg, st, checked); err != nil {
			return keys{}, err
		}
	}
	if err := bindKeys(cfg, st, checked, nil); err != nil {
		return keys{}, err
	}
	return k, p.WritePins(cfg.DataDir)
}

// loadDataDirKeys loads the keys of DATA_DIR/pki, those missing made anew, and writes
// what it made only once the store takes them: a refused start writes nothing.
func loadDataDirKeys(cfg Config, st *store.Store) (keys, error) {
	p, box, key, made, err := readDataDirKeys(cfg)
	if err != nil {
		return keys{}, err
	}
	ks := dataDirKeys(cfg, p, box, made)
	if err := checkKeys(cfg, st, ks); err != nil {
		return keys{}, err
	}
	return keys{pki: p, box: box}, bindKeys(cfg, st, ks, func() error {
		if err := p.Write(cfg.DataDir); err != nil {
			return fmt.Errorf("registry PKI: %w", err)
		}
		if made {
			return secret.WriteKey(filepath.Join(cfg.DataDir, pki.Dir), key)
		}
		return nil
	})
}

// readDataDirKeys reads the PKI and the secrets key of DATA_DIR/pki, writing nothing:
// what is missing is made in memory (pki.PKI.Made; made: the secrets key).
func readDataDirKeys(cfg Config) (p *pki.PKI, box *secret.Box, key []byte, made bool, err error) {
	if p, err = pki.Load(cfg.DataDir, cfg.Clock); err != nil {
		return nil, nil, nil, false, fmt.Errorf("registry PKI: %w", err)
	}
	if key, made, err = readSecretsKey(cfg); err != nil {
		return nil, nil, nil, false, err
	}
	box, err = secret.New(key)
	return p, box, key, made, err
}

// dataDirKeys are the PKI and the secrets key of DATA_DIR/pki as the store checks them.
func dataDirKeys(cfg Config, p *pki.PKI, box *secret.Box, made bool) []recordedKey {
	where, gone := filepath.Join(cfg.DataDir, pki.Dir), p.Made()
	if len(gone) > 0 {
		where = strings.Join(gone, ", ")
	}
	return []recordedKey{pkiKey(cfg, p, where, len(gone) > 0), secretsKey(cfg, box, secretsKeyFile(cfg), made)}
}

// toSeal are the keys a first start with a KEK seals into the store: the PKI, the
// secrets key, and the keys as checkKeys checked them.
type toSeal struct {
	pki     *pki.PKI
	secrets []byte
	checked []recordedKey
}

// keysToSeal are the keys a first start with a KEK seals: those of DATA_DIR/pki when it
// holds a serving CA (a registry moving to sealed keys keeps its pins and its secrets),
// else new ones. Either way they are checked before anything is written, the KEK file
// too: sealed, they would be the store's for good.
func keysToSeal(cfg Config, st *store.Store) (toSeal, error) {
	var t toSeal
	var box *secret.Box
	var err error
	pkiDir := filepath.Join(cfg.DataDir, pki.Dir)
	_, statErr := os.Stat(filepath.Join(pkiDir, "serving-ca.crt"))
	if statErr == nil {
		var made bool
		if t.pki, box, t.secrets, made, err = readDataDirKeys(cfg); err != nil {
			return t, err
		}
		t.checked = dataDirKeys(cfg, t.pki, box, made)
	} else {
		if t.pki, err = pki.Generate(cfg.Clock); err != nil {
			return t, err
		}
		t.secrets = secret.NewKey()
		if box, err = secret.New(t.secrets); err != nil {
			return t, err
		}
		t.checked = []recordedKey{pkiKey(cfg, t.pki, pkiDir, true), secretsKey(cfg, box, secretsKeyFile(cfg), true)}
	}
	if err := checkKeys(cfg, st, t.checked); err != nil {
		return t, err
	}
	if statErr == nil {
		cfg.Log.Info("the registry's keys in the data directory are sealed into the store; remove them from there once they are backed up", "dir", pkiDir)
	}
	return t, nil
}

// seal seals the keys with kek into the store, unless another replica sealed its own
// first, and returns what the store holds, and the keys it sealed as checkKeys checked
// them (none when another replica's are). The agent endpoint's keys are always new,
// since the ones the store kept were in the clear.
func (t toSeal) seal(st *store.Store, kek *pki.KEK) (store.SealedKeys, []recordedKey, error) {
	named := map[string][]byte{sealedSecrets: t.secrets, sealedStatelessReset: make([]byte, 32), sealedSessionTickets: make([]byte, 32)}
	rand.Read(named[sealedStatelessReset])
	rand.Read(named[sealedSessionTickets])
	s, err := pki.Seal(kek, t.pki, named)
	if err != nil {
		return store.SealedKeys{}, nil, err
	}
	rec := store.SealedKeys{KEK: s.KEK, Ciphertext: s.Ciphertext}
	err = st.Update(func(tx *store.Tx) error { return tx.PutSealedKeys(rec) })
	if proto.CodeOf(err) == proto.Conflict {
		err = st.View(func(tx *store.Tx) (err error) { rec, _, err = tx.SealedKeys(); return err })
		return rec, nil, err
	}
	return rec, t.checked, err
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

// recordedKey is one of the registry's keys as a start checks it against the ID the store
// records of it (store.Key): where it is kept, what the store's records that depend on it
// lose with another, and the flag that takes another once the key is lost for good.
type recordedKey struct {
	store.Key
	// where names the key's files (those gone, when gone), or the store's record it is
	// sealed in (sealed).
	where  string
	sealed bool
	// gone: where held no key, and this one is new.
	gone bool
	// is says what the key is to the store; since, from when.
	is, since string
	// loses says what a registry with another key does to the store's records.
	loses string
	// flag takes another key (taken: it is given) and breaks says what that start breaks.
	flag   string
	taken  bool
	breaks string
	// lost is set by checkKeys when the key is another than the store's, and taken.
	lost bool
}

// secretsKey is the secrets key of box, read from where (gone: it was not there, and it
// is new).
func secretsKey(cfg Config, box *secret.Box, where string, gone bool) recordedKey {
	return recordedKey{Key: box.Key(), where: where, gone: gone,
		is: "the key the store's secrets are sealed with", since: "they were sealed",
		loses: "a registry with this key would open none of them",
		flag:  "--secrets-key-lost", taken: cfg.SecretsKeyLost,
		breaks: "the secrets sealed with the lost key then never open, each tenant puts its secrets again (secrets put), " +
			"and a node's user data is rendered anew at its next deploy"}
}

// pkiKey is the PKI p, read from where (gone: the files where names were not there, and
// what they held is new).
func pkiKey(cfg Config, p *pki.PKI, where string, gone bool) recordedKey {
	return recordedKey{Key: store.Key{Of: store.PKIKey, ID: p.ID()}, where: where, gone: gone,
		is: "the PKI (CAs and join keys) the store's agents joined with and its join tokens were minted for", since: "they joined",
		loses: "every agent that joined would refuse a registry with it, its pins being another PKI's, the registry would refuse every agent's certificate, " +
			"and every join token minted before would fail",
		flag: "--pki-lost", taken: cfg.PKILost,
		breaks: "every agent (each node's, each site's) then joins again with a token minted after it and the new pins (pins.json), " +
			"the join tokens minted before fail, and every copy of admin.conf made before needs the new serving CA"}
}

// checkKeys refuses the keys the store's records do not depend on (store.Tx.CheckKey):
// a registry with one would serve beside records it cannot use. A key whose flag is
// given is taken, marked lost, and the start says what is lost. It writes nothing.
func checkKeys(cfg Config, st *store.Store, ks []recordedKey) error {
	checked := make([]error, len(ks))
	if err := st.View(func(tx *store.Tx) error {
		for i, k := range ks {
			if checked[i] = tx.CheckKey(k.Key); checked[i] != nil && !errors.Is(checked[i], store.ErrOtherKey) {
				return checked[i]
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for i := range ks {
		k, err := &ks[i], checked[i]
		if err == nil {
			continue
		}
		if k.taken {
			cfg.Log.Warn(k.flag+": what the store holds that depends on the lost key never works again; the store records this key from now on", "file", k.where, "detail", err.Error())
			k.lost = true
			continue
		}
		what := k.where + " is not " + k.is + ": it was replaced since " + k.since
		if k.gone {
			what = "gone: " + k.where + ", which held " + k.is
		}
		path, restore := "--data-dir", "Restore it from a backup of the data directory and start again"
		if k.sealed {
			path, restore = "--kek-file", "Restore the store from a backup"
		}
		return proto.Errorf(proto.InvalidConfig, "%s; %s (%v). %s; or, when no copy of it is left, start once with %s: %s",
			what, k.loses, err, restore, k.flag, k.breaks).WithPath(path)
	}
	return nil
}

// bindKeys records the IDs of the keys checkKeys checked as those the store's records
// depend on. write, when set, writes the keys where they are kept first: a start stopped
// between the two finds the keys and a store that records none, and records them then.
func bindKeys(cfg Config, st *store.Store, ks []recordedKey, write func() error) error {
	if write != nil {
		if err := write(); err != nil {
			return err
		}
	}
	replaced := make([]string, len(ks))
	err := st.Update(func(tx *store.Tx) (err error) {
		for i, k := range ks {
			if replaced[i], err = tx.BindKey(k.Key, k.lost); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, k := range ks {
		if replaced[i] != "" && !k.lost {
			cfg.Log.Info("the store holds nothing that depends on "+k.is+"; it records this one from now on", "key", k.ID, "before", replaced[i], "file", k.where)
		}
		if k.taken && !k.lost {
			cfg.Log.Warn(k.flag+" is given and the key is the store's: remove the flag, or a later loss of the key starts unnoticed", "file", k.where)
		}
	}
	return nil
}
