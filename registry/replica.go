package registry

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/better-compute/better-compute/fsutil"
)

// ReplicaFile is the file of the data directory that names this registry among the
// registries sharing its store: the owner of the workflows it drives (store.RunClaim).
// Made on first start; a restart keeps it, and so takes its workflows back at once. Each
// replica has a data directory of its own: one copied from another replica would drive
// the same workflows as it.
const ReplicaFile = "replica-id"

// replicaName reads DATA_DIR/replica-id, making it on first start.
func replicaName(dataDir string) (string, error) {
	path := filepath.Join(dataDir, ReplicaFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		id := make([]byte, 8)
		rand.Read(id)
		name := "rg_" + hex.EncodeToString(id)
		return name, fsutil.WriteFileAtomic(path, []byte(name+"\n"), 0o600)
	}
	if err != nil {
		return "", err
	}
	name := strings.TrimSpace(string(data))
	if name == "" {
		return "", fmt.Errorf("%s is empty: remove it, and the next start names this registry anew", path)
	}
	return name, nil
}
