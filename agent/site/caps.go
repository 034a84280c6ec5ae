package site

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
)

// The site's cache serves an image only at a URL with a capability once the registry
// names its key in the SiteSpec (proto.SiteSpec.CacheKey). The registry signs the URLs it
// hands out (deploy.image's); the site signs the ones it puts in boot scripts (a ramdisk
// boot's kernel, initrd and extra initrds from the cache, media.insert's ISO) with a key
// of its own, kept in its state directory so that a restart keeps the URLs of the
// scripts already served valid. docs/site.md describes it.

// capKeyFile is the site's own capability key in the state directory: an Ed25519 seed.
const capKeyFile = "cache-capability.key"

// registryKeyFile keeps the registry's key of the last SiteSpec that named one, so that a
// site restarted while the registry is out of reach goes on refusing URLs without a
// capability.
const registryKeyFile = "cache-registry-key"

// bootCapLifetime is how long the capability of a cache URL in a boot script lasts from
// when the script is served: long enough for an ISO booted by sanboot, which is read as
// long as what it booted runs. A shorter one would buy little: the boot server serves a
// machine's script, with fresh capabilities, to whoever asks by its MAC.
const bootCapLifetime = 7 * 24 * time.Hour

// capSigner mints the capabilities of the cache URLs the site builds, and keeps the
// registry's key in dir.
type capSigner struct {
	key   ed25519.PrivateKey
	clock clock.Clock
	dir   string
}

// loadOrCreateCapKey reads the site's own capability key from dir, making it on first
// use.
func loadOrCreateCapKey(dir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dir, capKeyFile)
	seed, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		seed = make([]byte, ed25519.SeedSize)
		rand.Read(seed)
		err = fsutil.WriteFileAtomic(path, seed, 0o600)
	}
	if err != nil {
		return nil, proto.Errorf(proto.InvalidConfig, "the site's cache capability key: %v", err).WithPath("stateDir")
	}
	if len(seed) != ed25519.SeedSize {
		return nil, proto.Errorf(proto.InvalidConfig, "the site's cache capability key %s is %d bytes, not %d: remove it, and the site makes a new one (the boot scripts served before it no longer open the cache)", path, len(seed), ed25519.SeedSize).WithPath("stateDir")
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// url is url, the cache's URL of digest, with a capability that lasts bootCapLifetime.
func (s *capSigner) url(url, digest string) string {
	return proto.CacheCapURL(url, s.key, digest, s.clock.Now().Add(bootCapLifetime))
}

// restoredKeys are the keys the cache takes capabilities of at start: those of the
// registry's key the state directory kept (cacheKeys), none when it kept none;
// INVALID_CONFIG when the kept key does not read.
func (s *capSigner) restoredKeys() ([]ed25519.PublicKey, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, registryKeyFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, proto.Errorf(proto.InvalidConfig, "the registry's cache key: %v", err).WithPath("stateDir")
	}
	keys, err := s.cacheKeys(string(data))
	if err != nil {
		err = proto.Errorf(proto.InvalidConfig, "%s: %s (remove the file: the registry names its key again once the site connects)", registryKeyFile, proto.AsError(err).Message).WithPath("stateDir")
	}
	return keys, err
}

// applyKeys are the keys the cache takes capabilities of under spec (cacheKeys), whose
// key it keeps in the state directory, or removes from there when spec names none.
func (s *capSigner) applyKeys(spec proto.SiteSpec) ([]ed25519.PublicKey, error) {
	keys, err := s.cacheKeys(spec.CacheKey)
	path := filepath.Join(s.dir, registryKeyFile)
	var saveErr error
	if spec.CacheKey == "" {
		if rmErr := os.Remove(path); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			saveErr = rmErr
		}
	} else if old, _ := os.ReadFile(path); string(old) != spec.CacheKey {
		saveErr = fsutil.WriteFileAtomic(path, []byte(spec.CacheKey), 0o600)
	}
	if saveErr != nil {
		saveErr = proto.Errorf(proto.Internal, "keep the registry's cache key in the state directory: %v", saveErr)
	}
	return keys, errors.Join(err, saveErr)
}

// cacheKeys are the keys the cache takes capabilities of under the registry's key
// registry: none (it serves every URL) when registry is empty, else the registry's and
// the site's own. A key that does not parse leaves the site's alone, and is
// INVALID_CONFIG.
func (s *capSigner) cacheKeys(registry string) ([]ed25519.PublicKey, error) {
	if registry == "" {
		return nil, nil
	}
	own := s.key.Public().(ed25519.PublicKey)
	pub, err := proto.ParseCacheKey(registry)
	if err != nil {
		return []ed25519.PublicKey{own}, err
	}
	return []ed25519.PublicKey{pub, own}, nil
}
