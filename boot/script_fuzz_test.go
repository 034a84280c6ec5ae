package boot

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot/dhcp"
	"github.com/better-compute/better-compute/clock"
)

// FuzzScriptPath requests any path of the boot server's HTTP side, as a machine or a
// stranger on the boot network may: /boot/<mac>.ipxe of a 6-byte MAC, in any spelling
// net.ParseMAC reads with - or :, answers a script (the machine's, or one that waits and
// asks again at the MAC's own script path); no other /boot/ name is answered, and only
// valid MACs are reported as discovered.
func FuzzScriptPath(f *testing.F) {
	dir := f.TempDir()
	for _, d := range []string{"ipxe", "ramdisk"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			f.Fatal(err)
		}
	}
	cfg := Config{Interface: "bc0", Mode: Proxy, ServerIP: netip.MustParseAddr("10.9.0.1"),
		IPXEDir: filepath.Join(dir, "ipxe"), RamdiskDir: filepath.Join(dir, "ramdisk")}
	var found sink
	s, err := New(cfg, Deps{Entries: entries{
		"52:54:00:00:00:01": {Kind: KindRamdisk, Ramdisk: Ramdisk{Kernel: "vmlinuz", Initrd: "initrd.img", Token: "rt_1", Registry: "https://registry:7443"}},
		"52:54:00:00:00:02": {Kind: KindDisk},
	}, Discoveries: &found, Clock: clock.NewFake(time.Unix(1e9, 0)), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	h := s.HTTPHandler()
	for _, p := range []string{"/boot/52-54-00-00-00-01.ipxe", "/boot/52:54:00:00:00:02.ipxe", "/boot/52-54-00-00-00-09.ipxe",
		"/boot/5254.0000.0009.ipxe", "/boot/00-00-00-00-fe-80-00-00-00-00-00-00-02-00-5e-10-00-00-00-01.ipxe",
		"/boot/nothing.ipxe", "/boot/52-54-00-00-00-01", "/boot/../ramdisk/x", "/boot/%0a.ipxe"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		req, err := http.NewRequest(http.MethodGet, "http://10.9.0.1/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Path = p
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		name, isScript := strings.CutPrefix(p, "/boot/")
		if !isScript || strings.Contains(name, "/") || p != cleanPath(p) {
			return // another route, or the mux's redirect to the clean path
		}
		base, hasSuffix := strings.CutSuffix(name, ".ipxe")
		mac, err := net.ParseMAC(strings.ReplaceAll(base, "-", ":"))
		if !hasSuffix || err != nil || len(mac) != 6 || !dhcp.MachineMAC(mac) {
			// Not a script's path, or a group or all-zero address: no machine's.
			if rec.Code != http.StatusNotFound {
				t.Fatalf("%q is not a script's path, yet answers %d", p, rec.Code)
			}
			return
		}
		body := rec.Body.String()
		if rec.Code != http.StatusOK || !strings.HasPrefix(body, "#!ipxe\n") {
			t.Fatalf("%q answers %d %q", p, rec.Code, body)
		}
		if mac.String() != "52:54:00:00:00:01" && mac.String() != "52:54:00:00:00:02" && !strings.Contains(body, "http://10.9.0.1"+dhcp.ScriptPath(mac)+"\n") {
			t.Fatalf("the wait script of %q does not ask again at its own path:\n%s", p, body)
		}
		found.mu.Lock()
		defer found.mu.Unlock()
		for _, d := range found.got {
			if len(d.MAC) != 6 {
				t.Fatalf("discovered %v", d.MAC)
			}
		}
		found.got = nil
	})
}

// cleanPath is the path as the mux wants it (its own rule): a request for any other
// spelling is redirected to this one.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}
