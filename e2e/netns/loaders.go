package netns

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// LoaderCache is where SignedLoaders keeps Debian's signed boot loaders between runs.
const LoaderCache = "/var/cache/better-compute-test/signed-loaders"

// Loaders are the paths of Debian's signed UEFI boot loaders.
type Loaders struct {
	// Shim is shim signed by Microsoft (shim-signed's shimx64.efi.signed).
	Shim string
	// GRUB is GRUB signed by Debian, the monolithic image that reads
	// \EFI\debian\grub.cfg from its disk (grub-efi-amd64-signed's grubx64.efi.signed).
	GRUB string
	// NetGRUB is Debian's network GRUB, signed alike, which loads grub.cfg from /grub on
	// the server it was loaded from (grubnetx64.efi.signed).
	NetGRUB string
}

// CachedLoaders are where SignedLoaders keeps the loaders, whether they are there yet
// or not.
func CachedLoaders() Loaders {
	return Loaders{Shim: filepath.Join(LoaderCache, "usr/lib/shim/shimx64.efi.signed"),
		GRUB:    filepath.Join(LoaderCache, "usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed"),
		NetGRUB: filepath.Join(LoaderCache, "usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed")}
}

// SignedLoaders returns Debian's signed shim and GRUBs, downloaded once into
// LoaderCache by `apt-get download` and unpacked, not installed (their packages would
// set up the host's own boot). It skips the test when they can not be had.
func SignedLoaders(t testing.TB) Loaders {
	t.Helper()
	dir := LoaderCache
	l := CachedLoaders()
	have := func() bool {
		for _, f := range []string{l.Shim, l.GRUB, l.NetGRUB} {
			if _, err := os.Stat(f); err != nil {
				return false
			}
		}
		return true
	}
	if have() {
		return l
	}
	debs := t.TempDir()
	cmd := exec.Command("apt-get", "download", "-q", "shim-signed", "grub-efi-amd64-signed")
	cmd.Dir = debs
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("needs Debian's shim-signed and grub-efi-amd64-signed (apt-get download): %v\n%s", err, out)
	}
	found, _ := filepath.Glob(filepath.Join(debs, "*.deb"))
	for _, deb := range found {
		if out, err := exec.Command("dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb -x %s: %v\n%s", deb, err, out)
		}
	}
	if !have() {
		t.Fatalf("%s lacks a signed loader after unpacking %v", dir, found)
	}
	return l
}
