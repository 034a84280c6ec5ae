package boot

import (
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot/grub"
	"github.com/better-compute/better-compute/boot/tftp"
	"github.com/better-compute/better-compute/clock"
)

// chainServer is a server with a signed chain (stand-in files) and four machines: one
// that boots the ramdisk under Secure Boot, one its disk, one whose entry GRUB can not
// boot (sanboot), and one whose extra initrd is not the server's.
func chainServer(t testing.TB, found *sink, log *slog.Logger) *Server {
	cfg := testConfig(t)
	dir := t.TempDir()
	cfg.ShimFile, cfg.GRUBFile = filepath.Join(dir, "shim"), filepath.Join(dir, "grub")
	for f, body := range map[string]string{cfg.ShimFile: "shim", cfg.GRUBFile: "grub", filepath.Join(cfg.RamdiskDir, "vmlinuz"): "kernel"} {
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ramdisk := Ramdisk{Kernel: "vmlinuz", Initrd: "initrd.img", Token: "rt_1", Registry: "https://registry:7443", Args: []string{"console=ttyS0"}}
	withExtra := ramdisk
	withExtra.Extras = []string{"http://10.9.0.1:8080/images/sha256/ab"}
	s, err := New(cfg, Deps{Entries: entries{
		"52:54:00:00:00:01": {Kind: KindRamdisk, SecureBoot: true, Ramdisk: ramdisk},
		"52:54:00:00:00:02": {Kind: KindDisk, SecureBoot: true},
		"52:54:00:00:00:03": {Kind: KindSanboot, SecureBoot: true, ISO: "http://10.9.0.1/x.iso"},
		"52:54:00:00:00:04": {Kind: KindRamdisk, SecureBoot: true, Ramdisk: withExtra},
	}, Discoveries: found, Clock: clock.NewFake(time.Unix(1e9, 0)), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	learn(t, s, "52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03", "52:54:00:00:00:04", "52:54:00:00:00:09")
	return s
}

// read is what the TFTP server sends for name (after its name check) to httptestAddr, or
// its error.
func read(s *Server, name string) (string, error) {
	rel, err := tftp.Resolve(name)
	if err != nil {
		return "", err
	}
	f, ok, err := s.chainFile(rel, &net.UDPAddr{IP: net.ParseIP(httptestAddr), Port: 1024})
	if !ok {
		return "", fs.ErrNotExist
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

// TestChainFiles reads what GRUB reads by TFTP: shim and GRUB, GRUB's first
// configuration, each machine's own, and the ramdisk's files.
func TestChainFiles(t *testing.T) {
	var found sink
	var logged strings.Builder
	s := chainServer(t, &found, slog.New(slog.NewTextHandler(&logged, nil)))
	for name, want := range map[string]string{
		"secureboot/shimx64.efi":       "shim",
		"/secureboot/grubx64.efi":      "grub",
		"/grub/grub.cfg":               grub.Entry,
		"/ramdisk/vmlinuz":             "kernel",
		"/boot/52:54:00:00:00:01.grub": "# better-compute: ramdisk for 52:54:00:00:00:01\nlinux /ramdisk/vmlinuz console=ttyS0 bc.registry=https://registry:7443 bc.token=rt_1\ninitrd /ramdisk/initrd.img\nboot\n",
		"/boot/52:54:00:00:00:02.grub": "# better-compute: disk for 52:54:00:00:00:02\nexit\n",
		"/boot/52:54:00:00:00:03.grub": "# better-compute: wait for 52:54:00:00:00:03\n",
		"/boot/52:54:00:00:00:04.grub": "# better-compute: wait for 52:54:00:00:00:04\n",
		"/boot/52:54:00:00:00:09.grub": "# better-compute: wait for 52:54:00:00:00:09\n",
	} {
		got, err := read(s, name)
		if err != nil || !strings.HasPrefix(got, want) {
			t.Errorf("%s: got %q, %v; want it to start with %q", name, got, err, want)
		}
	}
	for _, name := range []string{"/ramdisk/../grub", "/ramdisk/missing", "/boot/ff:ff:ff:ff:ff:ff.grub", "/boot/nothing.grub", "/secureboot/other.efi"} {
		if got, err := read(s, name); err == nil {
			t.Errorf("%s: got %q, want an error", name, got)
		}
	}
	if len(found.got) != 1 || found.got[0].MAC.String() != "52:54:00:00:00:09" || found.got[0].Source != "tftp" {
		t.Errorf("discoveries %+v, want 52:54:00:00:00:09 by tftp alone", found.got)
	}
	for _, mac := range []string{"52:54:00:00:00:03", "52:54:00:00:00:04"} {
		if !strings.Contains(logged.String(), "mac="+mac) {
			t.Errorf("no error logged for %s, whose entry GRUB can not boot:\n%s", mac, logged.String())
		}
	}
	os.Remove(s.cfg.ShimFile)
	if _, err := read(s, "secureboot/shimx64.efi"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a removed shim reads %v, want not found", err)
	}
}

// FuzzChainName asks the TFTP server's signed-chain names for anything, as any machine
// on the boot network may: a name is served only when it is one of the chain's, a file
// of the ramdisk directory, or a machine's configuration, and a configuration holds
// only lines Render writes.
func FuzzChainName(f *testing.F) {
	s := chainServer(f, &sink{}, slog.New(slog.DiscardHandler))
	for _, n := range []string{"/boot/52:54:00:00:00:01.grub", "/boot/52-54-00-00-00-01.grub", "/ramdisk/vmlinuz", "/grub/grub.cfg",
		"secureboot/shimx64.efi", "/ramdisk/../../etc/passwd", "/boot/%0a.grub", "/boot/52:54:00:00:00:01;reboot.grub"} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := read(s, name)
		if err != nil {
			return
		}
		rel, _ := tftp.Resolve(name)
		switch {
		case rel == shimName || rel == grubName || rel == grub.EntryName || rel == "ramdisk/vmlinuz":
		case strings.HasPrefix(rel, "boot/") && strings.HasSuffix(rel, ".grub"):
			for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
				if !strings.HasPrefix(l, "# better-compute: ") && !strings.HasPrefix(l, "echo '") && strings.ContainsAny(l, "$;|&<>{}()'\"\\`#\r") {
					t.Fatalf("%q: line %q", name, l)
				}
			}
		default:
			t.Fatalf("%q (%q) is served: %q", name, rel, got)
		}
	})
}
