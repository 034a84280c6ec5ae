package bcdconf

import (
	"os"
	"path/filepath"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto/bcdargv"
)

// Bundle is everything a join leaves in the configuration directory.
type Bundle struct {
	Config Config
	// Key is the agent's private key, PKCS#8 PEM.
	Key []byte
	// Certificate, AgentCA and ServingCA are PEM certificates.
	Certificate, AgentCA, ServingCA []byte
	// JoinEncryptionKey is the JoinService key as a JWK.
	JoinEncryptionKey []byte
}

// Write writes the bundle into dir (made 0700 when missing), each file atomically, the
// key 0600 and the rest 0644. config.toml goes last: it is what makes the directory a
// joined agent's.
func Write(dir string, b Bundle) error {
	conf, err := Encode(b.Config)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
		perm os.FileMode
	}{
		{KeyFile, b.Key, 0o600},
		{CertFile, b.Certificate, 0o644},
		{AgentCAFile, b.AgentCA, 0o644},
		{ServingCAFile, b.ServingCA, 0o644},
		{bcdargv.JoinEncryptionFile, b.JoinEncryptionKey, 0o644},
		{bcdargv.ConfigFile, conf, 0o644},
	}
	for _, f := range files {
		if err := fsutil.WriteFileAtomic(filepath.Join(dir, f.name), f.data, f.perm); err != nil {
			return err
		}
	}
	return nil
}
