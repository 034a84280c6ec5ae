package registry

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
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
	switch {
	case name == "":
		return "", proto.Errorf(proto.InvalidConfig, "%s is empty: remove it, and the next start names this registry anew", path).WithPath("--data-dir")
	case len(name) > maxReplicaName || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r > '~' }):
		return "", proto.Errorf(proto.InvalidConfig, "%s holds %s: a replica id is 1 to %d printable ASCII characters, no space among them; "+
			"write one, or remove the file, and the next start names this registry anew", path, proto.Quote(name), maxReplicaName).WithPath("--data-dir")
	}
	return name, nil
}

// maxReplicaName bounds a replica id: a store key of the replica's lease, stops and
// return plan (a bbolt key is at most 32 KiB: a longer id failed the start with the
// store's "key too large"), and the owner of every run the replica claims.
const maxReplicaName = 128
