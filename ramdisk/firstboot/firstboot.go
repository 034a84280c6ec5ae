// Package firstboot puts into a freshly written OS what it needs on its first boot:
// the user-data document where the OS's first-boot tool reads it, and bcd's pinned
// config.toml and join-encryption.jwk, so that the installed bcd joins the same
// registry.
//
//   - cloud-init: the NoCloud seed directory of the root file system,
//     /var/lib/cloud/seed/nocloud/{user-data,meta-data}, and /etc/bcd/ beside it.
//   - Ignition: /ignition/config.ign on the partition named "boot" (Fedora and RHEL
//     CoreOS, where coreos-installer puts it), else config.ign on the partition named
//     "OEM" (Flatcar). /etc is not written before Ignition runs, so the bcd files are
//     added to the config's storage.files instead.
//   - talos: refused (UNSUPPORTED); Talos takes its machine config from talos.config=.
package firstboot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto/bcdargv"
)

// The user-data kinds.
const (
	KindCloudInit = "cloud-init"
	KindIgnition  = "ignition"
	KindTalos     = "talos"
)

// ErrUnsupported marks a kind or an OS layout the ramdisk cannot install into.
var ErrUnsupported = errors.New("first-boot installation not supported")

// Files is what goes into the written OS.
type Files struct {
	// UserData is the rendered document, and Kind its kind.
	UserData []byte
	Kind     string
	// InstanceID names this installation to cloud-init (its meta-data instance-id);
	// empty derives one from the document.
	InstanceID string
	// Config is bcd's config.toml and JoinEncryptionKey its join-encryption.jwk.
	Config            []byte
	JoinEncryptionKey []byte
}

// Empty reports whether there is nothing to install.
func (f Files) Empty() bool {
	return len(f.UserData) == 0 && len(f.Config) == 0 && len(f.JoinEncryptionKey) == 0
}

// The cloud-init NoCloud seed directory.
const seedDir = "var/lib/cloud/seed/nocloud"

// CloudInit writes the seed and bcd's files into the root file system mounted at root.
// The file system is the image's: every path is resolved within it (os.Root), so a
// symbolic link the image holds on the way (/etc to /run/bcd, var/lib/cloud to ../..)
// fails the install instead of leading the files out of the partition.
func CloudInit(root string, f Files) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	if len(f.UserData) > 0 {
		if err := privateDir(r, seedDir); err != nil {
			return err
		}
		id := f.InstanceID
		if id == "" {
			sum := sha256.Sum256(f.UserData)
			id = "bc-" + hex.EncodeToString(sum[:8])
		}
		// The document holds a join token: readable by root only.
		if err := fsutil.WriteFileAtomicIn(r, filepath.Join(seedDir, "user-data"), f.UserData, 0o600); err != nil {
			return err
		}
		if err := fsutil.WriteFileAtomicIn(r, filepath.Join(seedDir, "meta-data"), []byte("instance-id: "+id+"\n"), 0o600); err != nil {
			return err
		}
	}
	return bcdFiles(r, strings.TrimPrefix(bcdargv.ConfigDir, "/"), f)
}

// bcdFiles writes config.toml and join-encryption.jwk into dir of r, as `bcd join` would.
func bcdFiles(r *os.Root, dir string, f Files) error {
	if len(f.Config) == 0 && len(f.JoinEncryptionKey) == 0 {
		return nil
	}
	if err := privateDir(r, dir); err != nil {
		return err
	}
	for name, data := range map[string][]byte{bcdargv.JoinEncryptionFile: f.JoinEncryptionKey, bcdargv.ConfigFile: f.Config} {
		if len(data) == 0 {
			continue
		}
		if err := fsutil.WriteFileAtomicIn(r, filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// privateDir makes dir of r 0700, and its missing parents 0755 as an OS has them.
func privateDir(r *os.Root, dir string) error {
	if err := r.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := r.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	return nil
}
