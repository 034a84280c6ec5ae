package site

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/bmc/drivers"
	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/cache"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

const mac = "52:54:00:12:34:56"

// fixture is the site's steps against a simulated Redfish BMC, whose credential each
// command carries as the registry attaches it.
type fixture struct {
	sim        *redfishsim.Server
	steps      *steps
	entries    *entries
	drivers    map[string]proto.DriverBinding
	credential *proto.BMCCredential
	stateDir   string
}

func newFixture(t *testing.T, cfg redfishsim.Config) *fixture {
	t.Helper()
	cfg.Username, cfg.Password = "admin", "hunter2"
	sim := redfishsim.New(cfg)
	t.Cleanup(sim.Close)
	pin, err := joinwire.Pin(sim.Certificate.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	conf, _ := json.Marshal(bmc.Config{Address: sim.URL, CredentialRef: "secret://rack-bmc",
		Options: map[string]string{"tlsPin": pin, "pollInterval": "10ms"}})
	binding := proto.DriverBinding{Driver: "redfish", Config: conf}
	f := &fixture{sim: sim, stateDir: t.TempDir(), credential: &proto.BMCCredential{Ref: "secret://rack-bmc", Username: "admin", Password: "hunter2"},
		drivers: map[string]proto.DriverBinding{"power": binding, "management": binding, "virtual-media": binding}}
	f.entries, err = openEntries(filepath.Join(f.stateDir, entriesFile), RamdiskConfig{Kernel: "vmlinuz", Initrd: "initrd.img", Args: []string{"console=ttyS0"}}, "http://10.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	f.steps = &steps{drivers: drivers.Registry(), entries: f.entries, changed: func() {}}
	return f
}

// run runs one relayed step as the session would.
func (f *fixture) run(t *testing.T, kind string, input any) (json.RawMessage, error) {
	t.Helper()
	in, _ := json.Marshal(input)
	payload, _ := json.Marshal(proto.SiteCommand{Node: "gpu-01", Drivers: f.drivers, Input: in, Credential: f.credential})
	return f.steps.handlers()[kind](context.Background(), payload)
}

func TestPowerAndBootDevice(t *testing.T) {
	f := newFixture(t, redfishsim.Config{})
	if _, err := f.run(t, "power.setPower", map[string]string{"action": "on"}); err != nil {
		t.Fatal(err)
	}
	out, err := f.run(t, "power.getPower", nil)
	if err != nil || string(out) != `{"state":"on"}` {
		t.Fatalf("getPower = %s, %v", out, err)
	}
	if _, err := f.run(t, "management.setBootDevice", map[string]any{"device": "pxe"}); err != nil {
		t.Fatal(err)
	}
	if got := f.sim.Boot(); got.Target != "Pxe" || got.Enabled != "Once" {
		t.Fatalf("boot override %+v, want Pxe once", got)
	}
	if _, err := f.run(t, "power.setPower", map[string]string{"action": "warp"}); proto.CodeOf(err) != proto.InvalidConfig {
		t.Fatalf("unknown action: %v, want INVALID_CONFIG", err)
	}
}

// TestCredentialOnlyWithTheCommand: the site logs in with the credential a command
// carries, for that command only; a command without one, or with one of another
// reference, reaches no BMC, and nothing the site logs holds the password.
func TestCredentialOnlyWithTheCommand(t *testing.T) {
	f := newFixture(t, redfishsim.Config{})
	var logged bytes.Buffer
	f.steps.env.Log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if _, err := f.run(t, "power.setPower", map[string]string{"action": "on"}); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*proto.BMCCredential{
		"none":              nil,
		"another reference": {Ref: "secret://other", Username: "admin", Password: "hunter2"},
	} {
		f.credential = c
		if _, err := f.run(t, "power.getPower", nil); proto.CodeOf(err) != proto.InvalidConfig || proto.AsError(err).Details.Path != "credentialRef" {
			t.Errorf("%s: %v, want INVALID_CONFIG at credentialRef", name, err)
		}
	}
	if strings.Contains(logged.String(), "hunter2") || logged.Len() == 0 {
		t.Errorf("the site's log shows the password, or nothing:\n%s", logged.String())
	}
}

// readyCache is a real site cache holding iso, pulled from a loopback HTTPS source at
// path; it returns the cache and the source's base URL, which serves other bytes of the
// same size at any other path.
func readyCache(t *testing.T, iso []byte, path string) (*cache.Cache, string) {
	t.Helper()
	other := bytes.Repeat([]byte{'x'}, len(iso))
	src := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := other
		if r.URL.Path == path {
			b = iso
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	}))
	t.Cleanup(src.Close)
	c, err := cache.Open(cache.Config{Dir: t.TempDir(), RootCAs: src.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; c.Close() })
	sum := sha256.Sum256(iso)
	digest := hex.EncodeToString(sum[:])
	if err := c.SetDesired([]proto.CacheImage{{Ref: "rescue@1", Digest: digest, Source: src.URL + path, SizeBytes: int64(len(iso))}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the ISO ready in the site cache", time.Minute, 5*time.Millisecond, func() bool { return c.Holds(digest, src.URL+path) })
	return c, src.URL
}

func TestSanbootWithoutVirtualMedia(t *testing.T) {
	f := newFixture(t, redfishsim.Config{NoVirtualMedia: true})
	iso := bytes.Repeat([]byte("an ISO of acme's "), 1000)
	c, base := readyCache(t, iso, "/acme.iso")
	f.steps.holds = c.Holds
	sum := sha256.Sum256(iso)
	digest := hex.EncodeToString(sum[:])
	// beta's image names acme's digest with its own source, which never served the bytes:
	// the machine is not booted from acme's copy.
	if _, err := f.run(t, "media.insert", proto.MediaInsert{URL: base + "/beta.iso", Digest: digest, MACs: []string{mac}}); proto.CodeOf(err) != proto.Unsupported {
		t.Fatalf("media.insert of another source's image of the digest: %v, want UNSUPPORTED", err)
	}
	hw, _ := net.ParseMAC(mac)
	if e, ok := f.entries.Entry(hw); ok {
		t.Fatalf("a sanboot entry from a source the cache never verified: %+v", e)
	}
	out, err := f.run(t, "media.insert", proto.MediaInsert{URL: base + "/acme.iso", Digest: digest, MACs: []string{mac}})
	if err != nil || string(out) != `{"sanboot":"`+digest+`"}` {
		t.Fatalf("media.insert = %s, %v", out, err)
	}
	e, ok := f.entries.Entry(hw)
	if want := (boot.Entry{Kind: boot.KindSanboot, ISO: "http://10.0.0.1:8080/images/sha256/" + digest}); !ok || !cmp.Equal(e, want) {
		t.Fatalf("entry %+v, want %+v", e, want)
	}
	if _, err := f.run(t, "management.setBootDevice", map[string]any{"device": "cd"}); err != nil {
		t.Fatal(err)
	}
	if got := f.sim.Boot(); got.Target != "Pxe" {
		t.Fatalf("cd on a sanboot machine set %q, want Pxe", got.Target)
	}
	if _, err := f.run(t, "media.eject", nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.entries.Entry(hw); ok {
		t.Fatal("media.eject left the sanboot entry")
	}
	if _, err := f.run(t, "media.insert", proto.MediaInsert{URL: "https://images.example/x.iso"}); proto.CodeOf(err) != proto.Unsupported {
		t.Fatalf("a URL without virtual media: %v, want UNSUPPORTED", err)
	}
}

func TestRamdiskEntryOutlivesRestart(t *testing.T) {
	f := newFixture(t, redfishsim.Config{})
	in := proto.PrepareRamdisk{MACs: []string{mac}, Token: "bcj_a.b", Registry: "https://r:7443",
		Pins: []string{"sha256/a", "sha256/b", "sha256/c"}, Args: []string{"bc.node=gpu-01"}}
	if _, err := f.run(t, proto.CommandPrepareRamdisk, in); err != nil {
		t.Fatal(err)
	}
	// The standing entry of the NodeSpec gives way to the relayed one.
	f.entries.setStanding([]proto.BootEntry{{Node: "gpu-01", MACs: []string{mac}, Kind: proto.BootDisk}})
	reopened, err := openEntries(filepath.Join(f.stateDir, entriesFile), f.entries.ramdisk, f.entries.httpBase)
	if err != nil {
		t.Fatal(err)
	}
	hw, _ := net.ParseMAC(mac)
	want := boot.Entry{Kind: boot.KindRamdisk, Ramdisk: boot.Ramdisk{Kernel: "vmlinuz", Initrd: "initrd.img", Token: "bcj_a.b",
		Registry: "https://r:7443", Pins: in.Pins, Args: []string{"console=ttyS0", "bc.node=gpu-01"}}}
	for name, tab := range map[string]*entries{"running": f.entries, "restarted": reopened} {
		if e, _ := tab.Entry(hw); !cmp.Equal(e, want) {
			t.Errorf("%s: entry %+v, want %+v", name, e, want)
		}
	}
	if s, _ := f.entries.section(); strings.Contains(string(s), "bcj_a.b") || !strings.Contains(string(s), `"kind":"ramdisk"`) {
		t.Errorf("bootEntries section %s: want the ramdisk entry without its token", s)
	}
	if _, err := f.run(t, "management.setBootDevice", map[string]any{"device": "disk"}); err != nil {
		t.Fatal(err)
	}
	if e, _ := f.entries.Entry(hw); e.Kind != boot.KindDisk || f.entries.relayedKind("gpu-01") != proto.BootDisk {
		t.Errorf("after setBootDevice disk: %+v, want the relayed entry turned to disk", e)
	}
	if _, err := f.run(t, "boot.cleanUp", nil); err != nil {
		t.Fatal(err)
	}
	if e, _ := f.entries.Entry(hw); e.Kind != boot.KindDisk {
		t.Errorf("after cleanUp: %+v, want the standing disk entry", e)
	}
	if _, err := f.run(t, proto.CommandPrepareRamdisk, proto.PrepareRamdisk{MACs: []string{mac}}); proto.CodeOf(err) != proto.InvalidInput {
		t.Errorf("a ramdisk entry without token: %v, want INVALID_INPUT", err)
	}
}

// TestSecureBootEntry: a ramdisk boot prepared for a machine under Secure Boot makes
// its boot server entry say so, across a restart of the site and after the deploy sets
// the disk as its boot device, so that its firmware keeps getting the signed chain.
func TestSecureBootEntry(t *testing.T) {
	f := newFixture(t, redfishsim.Config{})
	in := proto.PrepareRamdisk{MACs: []string{mac}, Token: "bcj_a.b", Registry: "https://r:7443",
		Pins: []string{"sha256/a", "sha256/b", "sha256/c"}, SecureBoot: true}
	if _, err := f.run(t, proto.CommandPrepareRamdisk, in); err != nil {
		t.Fatal(err)
	}
	hw, _ := net.ParseMAC(mac)
	reopened, err := openEntries(filepath.Join(f.stateDir, entriesFile), f.entries.ramdisk, f.entries.httpBase)
	if err != nil {
		t.Fatal(err)
	}
	for name, tab := range map[string]*entries{"running": f.entries, "restarted": reopened} {
		if e, _ := tab.Entry(hw); e.Kind != boot.KindRamdisk || !e.SecureBoot {
			t.Errorf("%s: entry %+v, want a ramdisk boot under Secure Boot", name, e)
		}
	}
	if _, err := f.run(t, "management.setBootDevice", map[string]any{"device": "disk"}); err != nil {
		t.Fatal(err)
	}
	if e, _ := f.entries.Entry(hw); e.Kind != boot.KindDisk || !e.SecureBoot {
		t.Errorf("after setBootDevice disk: %+v, want a disk entry under Secure Boot", e)
	}
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestRamdiskExtrasInScript: the extra initrds boot.prepareRamdisk names come out of
// the boot server's iPXE script as `initrd` lines after the ramdisk's own, each the site
// cache's URL of its digest; an extra that is no digest is refused.
func TestRamdiskExtrasInScript(t *testing.T) {
	f := newFixture(t, redfishsim.Config{})
	in := proto.PrepareRamdisk{MACs: []string{mac}, Token: "bcj_a.b", Registry: "https://r:7443",
		Pins: []string{"sha256/a", "sha256/b", "sha256/c"}, Args: []string{"bc.node=gpu-01"},
		Extras: []proto.RamdiskExtra{{Ref: "nvidia-dcgm@2026.09", Digest: strings.Repeat("ab", 32)}, {Ref: "site-tools@1", Digest: strings.Repeat("cd", 32)}}}
	if _, err := f.run(t, proto.CommandPrepareRamdisk, in); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, err := boot.New(boot.Config{Interface: "bc0", Mode: boot.Proxy, ServerIP: netip.MustParseAddr("10.0.0.1"), IPXEDir: dir, RamdiskDir: dir},
		boot.Deps{Entries: f.entries, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// The machine's DHCPREQUEST carries httptest's client address: its script goes there.
	hw, _ := net.ParseMAC(mac)
	req, err := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithHwAddr(hw),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("192.0.2.1"))), dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")))
	if err != nil {
		t.Fatal(err)
	}
	srv.DHCPHandler()(req)
	rec := httptest.NewRecorder()
	srv.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/boot/52-54-00-12-34-56.ipxe", nil))
	golden := filepath.Join("testdata", "ramdisk-extras.ipxe")
	if *update {
		if err := os.WriteFile(golden, rec.Body.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), rec.Body.String()); diff != "" {
		t.Errorf("script differs from %s (-want +got):\n%s", golden, diff)
	}

	in.Extras = append(in.Extras, proto.RamdiskExtra{Ref: "evil@1", Digest: "../../etc/shadow"})
	_, err = f.run(t, proto.CommandPrepareRamdisk, in)
	if proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "bootEntry.ramdisk.extras[2].digest" {
		t.Fatalf("an extra that is no digest: %v, want INVALID_INPUT at bootEntry.ramdisk.extras[2].digest", err)
	}
}

// The site handles every step proto says runs on a site, and nothing else.
func TestHandlesProtosSiteSteps(t *testing.T) {
	var want []string
	for _, k := range proto.Steps {
		if k.Runs[0] == proto.PlaceSite {
			want = append(want, k.Kind)
		}
	}
	var got []string
	for kind := range (&steps{}).handlers() {
		got = append(got, kind)
	}
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("site handlers (-proto +site):\n%s", diff)
	}
}

// TestACommandGivesBackItsSlot: a tenant whose machine never reaches the power state
// asked for (its OS ignores a graceful shutdown) would hold one of the site's command
// slots, which every tenant of the site shares, for as long as the wait it names: it
// names no wait beyond proto.MaxPowerTimeout (INVALID_CONFIG at the option), and the
// session ends a command by its step's timeout (TestExecute, agent/session).
func TestACommandGivesBackItsSlot(t *testing.T) {
	f := newFixture(t, redfishsim.Config{PowerState: "On", IgnoreGracefulShutdown: true})
	var b bmc.Config
	if err := json.Unmarshal(f.drivers["power"].Config, &b); err != nil {
		t.Fatal(err)
	}
	b.Options[proto.BMCOptionPowerTimeout] = "1000h"
	conf, _ := json.Marshal(b)
	in, _ := json.Marshal(map[string]string{"action": "graceful-off"})
	payload, _ := json.Marshal(proto.SiteCommand{Node: "gpu-01", Drivers: map[string]proto.DriverBinding{"power": {Driver: "redfish", Config: conf}},
		Input: in, Credential: f.credential})
	done := make(chan error, 1)
	go func() {
		_, err := f.steps.handlers()[proto.CommandSetPower](context.Background(), payload)
		done <- err
	}()
	select {
	case err := <-done:
		if proto.CodeOf(err) != proto.InvalidConfig || proto.AsError(err).Details.Path != "options.powerTimeout" {
			t.Fatalf("%v, want INVALID_CONFIG at options.powerTimeout", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the command still holds its slot after a minute")
	}
}

// failingLibrary is a BMC driver whose library dereferences nil on what the BMC
// answered, as gofish did on a collection answered null.
type failingLibrary struct{ bmc.Driver }

func (failingLibrary) Inspect(context.Context) (proto.OOBInventory, error) {
	var members *[]string
	return proto.OOBInventory{}, fmt.Errorf("%d members", len(*members))
}

// TestADriverPanicFailsItsCommandOnly: a driver that panics mid-step fails that command
// with DRIVER_ERROR, logs the stack, logs out of the BMC, and the site answers the next
// command: one BMC's answers must not end the agent every machine of the rack boots from.
func TestADriverPanicFailsItsCommandOnly(t *testing.T) {
	f := newFixture(t, redfishsim.Config{PowerState: "On"})
	open := f.steps.drivers["redfish"]
	f.steps.drivers = bmc.Registry{"redfish": func(ctx context.Context, cfg bmc.Config, env bmc.Env) (bmc.Driver, error) {
		d, err := open(ctx, cfg, env)
		if err != nil {
			return nil, err
		}
		return failingLibrary{d}, nil
	}}
	var logged bytes.Buffer
	f.steps.env.Log = slog.New(slog.NewJSONHandler(&logged, nil))
	_, err := f.run(t, proto.CommandInspectOOB, nil)
	if e := proto.AsError(err); e.Code != proto.DriverError || !strings.Contains(e.Message, "nil pointer") || !strings.Contains(e.Message, f.sim.URL) {
		t.Fatalf("inspect through a driver that panics: %v, want DRIVER_ERROR naming the BMC and the failure", err)
	}
	if !strings.Contains(logged.String(), `"msg":"BMC driver failed"`) || !strings.Contains(logged.String(), "failingLibrary.Inspect") {
		t.Fatalf("the site's log does not hold the failure's stack:\n%s", logged.String())
	}
	if n := f.sim.Sessions(); n != 0 {
		t.Fatalf("%d BMC sessions left open after the panic", n)
	}
	if out, err := f.run(t, proto.CommandGetPower, nil); err != nil || string(out) != `{"state":"on"}` {
		t.Fatalf("the next command: %s, %v", out, err)
	}
}
