package firstboot

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto/bcdargv"
)

// IgnitionConfig returns the Ignition document with bcd's files added to its
// storage.files (replacing entries of the same path), leaving everything else as it
// was: only the objects on the way to storage.files are decoded, every other value is
// kept as its text, so a number Go's float64 cannot hold (2^53+1) comes back exactly.
// Each member on the way is the one Ignition reads (member): "Storage" is storage to
// Ignition, and bcd's files go into it. Only Ignition spec 3 documents are accepted.
func IgnitionConfig(doc []byte, f Files) ([]byte, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(doc, &cfg); err != nil {
		return nil, fmt.Errorf("the Ignition config is not a JSON object: %w", err)
	}
	var ign map[string]json.RawMessage
	var v string
	ignKey, err := member(cfg, "ignition")
	if err != nil {
		return nil, err
	}
	if json.Unmarshal(cfg[ignKey], &ign) == nil {
		versionKey, err := member(ign, "version")
		if err != nil {
			return nil, err
		}
		_ = json.Unmarshal(ign[versionKey], &v) // a version that is not text is no version
	}
	if !strings.HasPrefix(v, "3.") {
		return nil, fmt.Errorf("%w: Ignition config version %q; spec 3 is needed", ErrUnsupported, v)
	}
	add := map[string][]byte{}
	for name, data := range map[string][]byte{bcdargv.ConfigFile: f.Config, bcdargv.JoinEncryptionFile: f.JoinEncryptionKey} {
		if len(data) > 0 {
			add[path.Join(bcdargv.ConfigDir, name)] = data
		}
	}
	if len(add) == 0 {
		return doc, nil
	}
	storageKey, err := member(cfg, "storage")
	if err != nil {
		return nil, err
	}
	var storage map[string]json.RawMessage
	if raw := cfg[storageKey]; raw != nil && json.Unmarshal(raw, &storage) != nil {
		return nil, fmt.Errorf("the Ignition config's storage is not an object")
	}
	if storage == nil { // absent or null
		storage = map[string]json.RawMessage{}
	}
	filesKey, err := member(storage, "files")
	if err != nil {
		return nil, err
	}
	var old []json.RawMessage
	if raw := storage[filesKey]; raw != nil && json.Unmarshal(raw, &old) != nil {
		return nil, fmt.Errorf("the Ignition config's storage.files is not an array")
	}
	files := []json.RawMessage{}
	for _, e := range old {
		var entry map[string]json.RawMessage
		var p string
		if json.Unmarshal(e, &entry) == nil {
			pathKey, err := member(entry, "path")
			if err != nil {
				return nil, err
			}
			if json.Unmarshal(entry[pathKey], &p) == nil && add[p] != nil {
				continue
			}
		}
		files = append(files, e)
	}
	for _, p := range []string{path.Join(bcdargv.ConfigDir, bcdargv.ConfigFile), path.Join(bcdargv.ConfigDir, bcdargv.JoinEncryptionFile)} {
		if data := add[p]; data != nil {
			entry, err := json.Marshal(map[string]any{
				"path": p, "mode": 0o644, "overwrite": true,
				"contents": map[string]any{"source": "data:;base64," + base64.StdEncoding.EncodeToString(data)},
			})
			if err != nil {
				return nil, err
			}
			files = append(files, entry)
		}
	}
	if storage[filesKey], err = json.Marshal(files); err != nil {
		return nil, err
	}
	if cfg[storageKey], err = json.Marshal(storage); err != nil {
		return nil, err
	}
	return json.Marshal(cfg)
}

// member returns the member of obj Ignition reads as its field name: Ignition decodes its
// config with encoding/json, which takes a member whose name equals the field's in any
// case (strings.EqualFold), so "Storage" is storage. It is name itself when obj has none.
// Two such members are refused: Ignition would read both, the later over the earlier,
// and which files it kept would not be the ones the ramdisk adds to (the registry refuses
// such a document when it renders it).
func member(obj map[string]json.RawMessage, name string) (string, error) {
	var found []string
	for key := range obj {
		if strings.EqualFold(key, name) {
			found = append(found, key)
		}
	}
	switch len(found) {
	case 0:
		return name, nil
	case 1:
		return found[0], nil
	}
	slices.Sort(found)
	return "", fmt.Errorf("the Ignition config has %d members Ignition reads as %s (%s): write it once", len(found), name, strings.Join(found, ", "))
}

// The places Ignition reads its config from on metal, by the name of the partition.
var ignitionPaths = map[string]string{
	"boot": "ignition/config.ign", // Fedora and RHEL CoreOS
	"OEM":  "config.ign",          // Flatcar
}

// Ignition writes the config, with bcd's files added, into the partition mounted at
// dir, named partName; its path is resolved within the partition, as CloudInit's are.
func Ignition(dir, partName string, f Files) error {
	rel, ok := ignitionPaths[partName]
	if !ok {
		return fmt.Errorf("%w: Ignition reads no config from a partition named %q", ErrUnsupported, partName)
	}
	doc, err := IgnitionConfig(f.UserData, f)
	if err != nil {
		return err
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := privateDir(r, filepath.Dir(rel)); err != nil {
		return err
	}
	return fsutil.WriteFileAtomicIn(r, rel, doc, 0o600)
}
