package firstboot

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto/bcdargv"
)

// IgnitionConfig returns the Ignition document with bcd's files added to its
// storage.files (replacing entries of the same path), leaving everything else as it
// was. Only Ignition spec 3 documents are accepted.
func IgnitionConfig(doc []byte, f Files) ([]byte, error) {
	var cfg map[string]any
	if err := json.Unmarshal(doc, &cfg); err != nil {
		return nil, fmt.Errorf("the Ignition config is not JSON: %w", err)
	}
	ign, _ := cfg["ignition"].(map[string]any)
	if v, _ := ign["version"].(string); !strings.HasPrefix(v, "3.") {
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
	storage, ok := cfg["storage"].(map[string]any)
	if !ok && cfg["storage"] != nil {
		return nil, fmt.Errorf("the Ignition config's storage is not an object")
	}
	if storage == nil {
		storage = map[string]any{}
		cfg["storage"] = storage
	}
	old, ok := storage["files"].([]any)
	if !ok && storage["files"] != nil {
		return nil, fmt.Errorf("the Ignition config's storage.files is not an array")
	}
	files := []any{}
	for _, e := range old {
		if m, ok := e.(map[string]any); ok {
			if p, _ := m["path"].(string); add[p] != nil {
				continue
			}
		}
		files = append(files, e)
	}
	for _, p := range []string{path.Join(bcdargv.ConfigDir, bcdargv.ConfigFile), path.Join(bcdargv.ConfigDir, bcdargv.JoinEncryptionFile)} {
		if data := add[p]; data != nil {
			files = append(files, map[string]any{
				"path": p, "mode": 0o644, "overwrite": true,
				"contents": map[string]any{"source": "data:;base64," + base64.StdEncoding.EncodeToString(data)},
			})
		}
	}
	storage["files"] = files
	return json.Marshal(cfg)
}

// The places Ignition reads its config from on metal, by the name of the partition.
var ignitionPaths = map[string]string{
	"boot": "ignition/config.ign", // Fedora and RHEL CoreOS
	"OEM":  "config.ign",          // Flatcar
}

// Ignition writes the config, with bcd's files added, into the partition mounted at
// dir, named partName.
func Ignition(dir, partName string, f Files) error {
	rel, ok := ignitionPaths[partName]
	if !ok {
		return fmt.Errorf("%w: Ignition reads no config from a partition named %q", ErrUnsupported, partName)
	}
	doc, err := IgnitionConfig(f.UserData, f)
	if err != nil {
		return err
	}
	p := filepath.Join(dir, rel)
	if err := privateDir(filepath.Dir(p)); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(p, doc, 0o600)
}
