package bcdconf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

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

// Write writes the bundle into dir (made 0700 when missing, and fsynced in its parent),
// under the directory's lock (lockDir), each file atomically, the key 0600 and the rest
// 0644. config.toml goes last: it is what makes the directory a joined agent's. Over an
// earlier join, its config.toml and a cut-short renewal's pair (RenewedFile, which
// LoadAgent prefers) go first: a crash in between leaves a directory LoadAgent refuses as
// a join cut short, never this join's key beside the earlier one's certificate, or its
// certificate with the earlier config.
func Write(dir string, b Bundle) error {
	conf, err := Encode(b.Config)
	if err != nil {
		return err
	}
	if err := fsutil.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	for _, name := range []string{bcdargv.ConfigFile, RenewedFile} {
		if err := fsutil.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
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

// lockDir takes the exclusive lock of the configuration directory dir, a flock(2) on
// LockFile, waiting while another holds it, and returns what releases it. Each file of
// a join is replaced whole, but a join is six files: two `bcd join` runs into one
// directory at once would leave one's key beside the other's certificate, or a
// certificate of one with the other's config; under the lock they write one after the
// other, and the directory holds the later join whole. The lock goes with the open
// file, so a join killed while it holds it holds it no more.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}
