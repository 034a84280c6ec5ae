package firstboot

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto/bcdargv"
)

// IgnitionConfig returns the Ignition document with bcd's files added to its
// storage.files (replacing entries of the same path), leaving everything else as it
// was: only the objects on the way to storage.files are decoded, every other value is
// kept as its text, so a number Go's float64 cannot hold (2^53+1) comes back exactly.
// Only Ignition spec 3 documents are accepted.
func IgnitionConfig(doc []byte, f Files) ([]byte, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(doc, &cfg); err != nil {
		return nil, fmt.Errorf("the Ignition config is not a JSON object: %w", err)
	}
	var ign map[string]json.RawMessage
	var v string
	if json.Unmarshal(cfg["ignition"], &ign) == nil {
		_ = json.Unmarshal(ign["version"], &v) // a version that is not text is no version
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
	var storage map[string]json.RawMessage
	if raw := cfg["storage"]; raw != nil && json.Unmarshal(raw, &storage) != nil {
		return nil, fmt.Errorf("the Ignition config's storage is not an object")
	}
	if storage == nil { // absent or null
		storage = map[string]json.RawMessage{}
	}
	var old []json.RawMessage
	if raw := storage["files"]; raw != nil && json.Unmarshal(raw, &old) != nil {
		return nil, fmt.Errorf("the Ignition config's storage.files is not an array")
	}
	files := []json.RawMessage{}
	for _, e := range old {
		var entry map[string]json.RawMessage
		var p string
		if json.Unmarshal(e, &entry) == nil && json.Unmarshal(entry["path"], &p) == nil && add[p] != nil {
			continue
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
	var err error
	if storage["files"], err = json.Marshal(files); err != nil {
		return nil, err
	}
	if cfg["storage"], err = json.Marshal(storage); err != nil {
		return nil, err
	}
	return json.Marshal(cfg)
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
