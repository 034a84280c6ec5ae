package metal

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/google/go-cmp/cmp"
)

// hardware is the hardware profiles the tests' registry knows.
var hardware = HardwareProfiles{
	"gpu-redfish": {Drivers: map[string]Binding{"power": {Driver: "redfish"}, "management": {Driver: "redfish"},
		"boot": {Driver: "ipxe"}, "deploy": {Driver: "image-stream"}, "inspect": {Driver: "agent"}}},
	"gpu-ipmi-power": {Drivers: map[string]Binding{"power": {Driver: "ipmi", Config: json.RawMessage(`{"cipher":3}`)}}},
}

func binding(driver, config string) store.DriverBinding {
	b := store.DriverBinding{Driver: driver}
	if config != "" {
		b.Config = json.RawMessage(config)
	}
	return b
}

func TestResolveDriverBindings(t *testing.T) {
	bmc := store.BMC{Driver: "redfish", Address: "https://10.0.0.5", CredentialRef: "secret://bmc/n1"}
	bmcConfig := `{"address":"https://10.0.0.5","credentialRef":"secret://bmc/n1"}`
	cases := map[string]struct {
		bmc       store.BMC
		hw        string
		overrides map[string]Binding
		want      map[string]store.DriverBinding
	}{
		"the BMC alone binds power, management and virtual-media": {
			bmc: bmc,
			want: map[string]store.DriverBinding{"power": binding("redfish", bmcConfig), "management": binding("redfish", bmcConfig),
				"virtual-media": binding("redfish", bmcConfig)},
		},
		"a BMC without a credential reference": {
			bmc: store.BMC{Driver: "qmp", Address: "unix:/run/qmp/n1.sock"},
			want: map[string]store.DriverBinding{"power": binding("qmp", `{"address":"unix:/run/qmp/n1.sock"}`),
				"management": binding("qmp", `{"address":"unix:/run/qmp/n1.sock"}`), "virtual-media": binding("qmp", `{"address":"unix:/run/qmp/n1.sock"}`)},
		},
		"the hardware profile overrides per concern and adds the others": {
			bmc: bmc, hw: "gpu-redfish",
			want: map[string]store.DriverBinding{"power": binding("redfish", bmcConfig), "management": binding("redfish", bmcConfig),
				"virtual-media": binding("redfish", bmcConfig), "boot": binding("ipxe", ""), "deploy": binding("image-stream", ""), "inspect": binding("agent", "")},
		},
		"a BMC concern keeps the BMC's address and credential under the profile's config": {
			bmc: bmc, hw: "gpu-ipmi-power",
			want: map[string]store.DriverBinding{"power": binding("ipmi", `{"address":"https://10.0.0.5","cipher":3,"credentialRef":"secret://bmc/n1"}`),
				"management": binding("redfish", bmcConfig), "virtual-media": binding("redfish", bmcConfig)},
		},
		"no layer moves the BMC's address or credential": {
			bmc:       bmc,
			overrides: map[string]Binding{"power": {Driver: "redfish", Config: json.RawMessage(`{"address":"https://203.0.113.9","credentialRef":"secret://other","options":{"auth":"basic"}}`)}},
			want: map[string]store.DriverBinding{"power": binding("redfish", `{"address":"https://10.0.0.5","credentialRef":"secret://bmc/n1","options":{"auth":"basic"}}`),
				"management": binding("redfish", bmcConfig), "virtual-media": binding("redfish", bmcConfig)},
		},
		"per-node overrides win over both": {
			bmc: bmc, hw: "gpu-redfish",
			overrides: map[string]Binding{"boot": {Driver: "http-boot", Config: json.RawMessage(`{"url":"https://boot.example"}`)}, "virtual-media": {Driver: "sanboot"}},
			want: map[string]store.DriverBinding{"power": binding("redfish", bmcConfig), "management": binding("redfish", bmcConfig),
				"virtual-media": binding("sanboot", bmcConfig), "boot": binding("http-boot", `{"url":"https://boot.example"}`),
				"deploy": binding("image-stream", ""), "inspect": binding("agent", "")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hw, err := hardware.lookup(tc.hw)
			if err != nil {
				t.Fatal(err)
			}
			got := resolveDriverBindings(tc.bmc, hw, tc.overrides)
			if diff := cmp.Diff(tc.want, got, cmp.Transformer("json", func(r json.RawMessage) string { return string(r) })); diff != "" {
				t.Errorf("bindings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnrollResolvesBindingsAndRefusesUnknownProfiles(t *testing.T) {
	h := newHarness(t)
	bmc := store.BMC{Driver: "redfish", Address: "https://10.0.0.5", CredentialRef: "secret://bmc/n1"}
	mac := func(i int) []string { return []string{"52:54:00:00:01:0" + string(rune('0'+i))} }
	cases := map[string]struct {
		e          Enrollment
		wantBoot   string
		code       proto.Code
		path       string
		beforePool func()
	}{
		"the pool's hardware profile": {e: Enrollment{Pool: "gpu", MACs: mac(1), BMC: bmc}, wantBoot: "ipxe"},
		"the node's own hardware profile wins over the pool's": {
			e: Enrollment{Pool: "gpu", MACs: mac(2), BMC: bmc, HardwareProfile: "gpu-ipmi-power"}, wantBoot: ""},
		"a per-node override": {
			e: Enrollment{Pool: "gpu", MACs: mac(3), BMC: bmc, Drivers: map[string]Binding{"boot": {Driver: "http-boot"}}}, wantBoot: "http-boot"},
		"an unknown hardware profile of the node": {
			e: Enrollment{Pool: "gpu", MACs: mac(4), BMC: bmc, HardwareProfile: "nope"}, code: proto.InvalidInput, path: "hardwareProfile"},
		"an unknown concern": {
			e: Enrollment{Pool: "gpu", MACs: mac(5), BMC: bmc, Drivers: map[string]Binding{"cooling": {Driver: "fan"}}}, code: proto.InvalidInput, path: "drivers.cooling"},
		"a secret instead of its reference": {
			e: Enrollment{Pool: "gpu", MACs: mac(6), BMC: store.BMC{Driver: "redfish", Address: "https://10.0.0.5", CredentialRef: "hunter2"}}, code: proto.InvalidInput, path: "bmc.credentialRef"},
		"a credential file": {
			e: Enrollment{Pool: "gpu", MACs: mac(6), BMC: store.BMC{Driver: "redfish", Address: "https://10.0.0.5", CredentialRef: "/etc/shadow"}}, code: proto.InvalidInput, path: "bmc.credentialRef"},
		"a credential file URL": {
			e: Enrollment{Pool: "gpu", MACs: mac(6), BMC: store.BMC{Driver: "redfish", Address: "https://10.0.0.5", CredentialRef: "file:///etc/shadow"}}, code: proto.InvalidInput, path: "bmc.credentialRef"},
		"a secret reference leaving its tenant": {
			e: Enrollment{Pool: "gpu", MACs: mac(6), BMC: store.BMC{Driver: "redfish", Address: "https://10.0.0.5", CredentialRef: "secret://../root/rack-bmc"}}, code: proto.InvalidInput, path: "bmc.credentialRef"},
		"the platform's credential, bound by a tenant": {
			e: Enrollment{Pool: "gpu", MACs: mac(6), BMC: store.BMC{Driver: "redfish", Address: "https://10.0.0.5", CredentialRef: "secret://platform/rack-bmc"}}, code: proto.Forbidden, path: "bmc.credentialRef"},
		"a BMC outside the site's networks": {
			e: Enrollment{Pool: "gpu", MACs: mac(6), BMC: store.BMC{Driver: "redfish", Address: "https://10.0.1.5", CredentialRef: "secret://bmc/n1"}}, code: proto.InvalidInput, path: "bmc.address"},
		"a BMC named by a host name": {
			e: Enrollment{Pool: "gpu", MACs: mac(6), BMC: store.BMC{Driver: "redfish", Address: "https://bmc.example:443", CredentialRef: "secret://bmc/n1"}}, code: proto.InvalidInput, path: "bmc.address"},
		"a socket of the site host, bound by a tenant": {
			e: Enrollment{Pool: "gpu", MACs: mac(6), BMC: store.BMC{Driver: "qmp", Address: "unix:/run/docker.sock"}}, code: proto.InvalidInput, path: "bmc.address"},
		"a driver config naming another BMC address": {
			e: Enrollment{Pool: "gpu", MACs: mac(6), BMC: bmc, Drivers: map[string]Binding{"power": {Driver: "redfish", Config: json.RawMessage(`{"address":"https://203.0.113.9"}`)}}}, code: proto.InvalidInput, path: "drivers.power.config.address"},
		"a driver config naming another credential": {
			e: Enrollment{Pool: "gpu", MACs: mac(6), BMC: bmc, Drivers: map[string]Binding{"management": {Driver: "redfish", Config: json.RawMessage(`{"credentialRef":"/etc/shadow"}`)}}}, code: proto.InvalidInput, path: "drivers.management.config.credentialRef"},
		"a malformed MAC":       {e: Enrollment{Pool: "gpu", MACs: []string{"52:54:00"}, BMC: bmc}, code: proto.InvalidInput, path: "macs[0]"},
		"a malformed UUID":      {e: Enrollment{Pool: "gpu", ProductUUID: "4c4c", BMC: bmc}, code: proto.InvalidInput, path: "productUuid"},
		"no BMC driver":         {e: Enrollment{Pool: "gpu", MACs: mac(7), BMC: store.BMC{Address: "x"}}, code: proto.InvalidInput, path: "bmc.driver"},
		"an unknown BMC driver": {e: Enrollment{Pool: "gpu", MACs: mac(7), BMC: store.BMC{Driver: "ipmi", Address: "https://10.0.0.5"}}, code: proto.InvalidInput, path: "bmc.driver"},
		"an unknown pool":       {e: Enrollment{Pool: "cpu", MACs: mac(8), BMC: bmc}, code: proto.NotFound, path: "pool"},
		"the platform binds its own credential and a socket": {
			e: Enrollment{Pool: "gpu", MACs: mac(9), BMC: store.BMC{Driver: "redfish", Address: "unix:/run/qmp/n9.sock", CredentialRef: "secret://platform/rack-bmc"}, Platform: true}, wantBoot: "ipxe"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.e.Tenant = "acme"
			var n store.Node
			err := h.store.Update(func(tx *store.Tx) (err error) { n, _, err = h.svc.Enroll(tx, tc.e); return err })
			if tc.code != "" {
				if proto.CodeOf(err) != tc.code || proto.AsError(err).Details.Path != tc.path {
					t.Fatalf("got %v, want %s at %s", err, tc.code, tc.path)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.Drivers["boot"].Driver != tc.wantBoot || n.Drivers["power"].Driver == "" || n.State != store.NodeEnrolling || n.PlatformBMC != tc.e.Platform {
				t.Errorf("node %+v", n)
			}
		})
	}
	// A node of a pool whose hardware profile the registry forgot (a restart with another
	// file) is refused; TestCheckPoolPolicy refuses a pool naming an unknown one.
	delete(h.svc.cfg.HardwareProfiles, "gpu-redfish")
	err := h.store.Update(func(tx *store.Tx) error {
		_, _, err := h.svc.Enroll(tx, Enrollment{Tenant: "acme", Pool: "gpu", MACs: mac(8), BMC: bmc})
		return err
	})
	if proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "pool" {
		t.Errorf("the pool's forgotten hardware profile: %v", err)
	}
}

func TestLoadHardwareProfiles(t *testing.T) {
	cases := map[string]struct {
		file string
		path string
	}{
		"ok":                                 {`{"version":1,"hardwareProfiles":{"gpu-redfish":{"drivers":{"power":"redfish","boot":{"driver":"ipxe","config":{"chain":"x"}}}}}}`, ""},
		"an unknown field":                   {`{"version":1,"profiles":{}}`, "profiles"},
		"a duplicate profile":                {`{"version":1,"hardwareProfiles":{"a":{},"a":{}}}`, "hardwareProfiles.a"},
		"another version":                    {`{"version":2,"hardwareProfiles":{}}`, "version"},
		"an unknown concern":                 {`{"version":1,"hardwareProfiles":{"a":{"drivers":{"cooling":"fan"}}}}`, "hardwareProfiles.a.drivers.cooling"},
		"a bad driver name":                  {`{"version":1,"hardwareProfiles":{"a":{"drivers":{"power":"Redfish"}}}}`, "hardwareProfiles.a.drivers.power"},
		"a config that is not an object":     {`{"version":1,"hardwareProfiles":{"a":{"drivers":{"power":{"driver":"redfish","config":[]}}}}}`, "hardwareProfiles.a.drivers.power.config"},
		"an unknown field of a binding":      {`{"version":1,"hardwareProfiles":{"a":{"drivers":{"power":{"driver":"redfish","options":{}}}}}}`, "hardwareProfiles.a.drivers.power.options"},
		"a binding that is a number":         {`{"version":1,"hardwareProfiles":{"a":{"drivers":{"power":3}}}}`, "hardwareProfiles.a.drivers.power"},
		"a driver that is not a string":      {`{"version":1,"hardwareProfiles":{"a":{"drivers":{"power":{"driver":["redfish"]}}}}}`, "hardwareProfiles.a.drivers.power.driver"},
		"a file that is not an object":       {`[]`, "."},
		"a credential in a hardware profile": {`{"version":1,"hardwareProfiles":{"a":{"drivers":{"power":{"driver":"redfish","config":{"credentialRef":"/etc/bcd/bmc.json"}}}}}}`, "hardwareProfiles.a.drivers.power.config.credentialRef"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "hw.json")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			hp, err := LoadHardwareProfiles(path)
			if name == "ok" {
				if err != nil || hp["gpu-redfish"].Drivers["boot"].Driver != "ipxe" || string(hp["gpu-redfish"].Drivers["boot"].Config) != `{"chain":"x"}` {
					t.Fatalf("got %+v, %v", hp, err)
				}
				return
			}
			if proto.CodeOf(err) != proto.InvalidConfig || proto.AsError(err).Details.Path != tc.path || !strings.Contains(err.Error(), path) {
				t.Fatalf("got %v, want INVALID_CONFIG at %q naming the file", err, tc.path)
			}
		})
	}
}

// TestLoadHardwareProfilesUnreadable: a hardware profiles file the registry cannot read
// (missing, a directory) is INVALID_CONFIG at "." that names the file once and says what
// to give instead, as every problem of an operator's file is.
func TestLoadHardwareProfilesUnreadable(t *testing.T) {
	dir := t.TempDir()
	for name, path := range map[string]string{
		"a directory":    dir,
		"a missing file": filepath.Join(dir, "hw.json"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := LoadHardwareProfiles(path)
			e := proto.AsError(err)
			if e.Code != proto.InvalidConfig || e.Details.Path != "." || strings.Count(e.Message, path) != 1 || !strings.Contains(e.Message, "--hardware-profiles") {
				t.Fatalf("got %v at %q, want INVALID_CONFIG at \".\" naming %s once and saying what to give", err, e.Details.Path, path)
			}
		})
	}
}

// TestProfileDriversBindItsOwnSteps: a profile's drivers bind the site operations its
// steps name (power.setPower), over the node's, while metal.ensureRamdisk's own commands
// keep the node's bindings; the BMC's address and credential reference stay the node's
// whatever the profile's config names.
func TestProfileDriversBindItsOwnSteps(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	h.machine.forget()
	run, err := h.deploy(node, "testdata/with-drivers.json")
	if err != nil {
		t.Fatal(err)
	}
	run, n := h.end(run.ID)
	if run.State != store.RunSucceeded {
		t.Fatalf("run %s: %+v", run.State, n.Failure)
	}
	got := map[string]string{}
	h.store.View(func(tx *store.Tx) error {
		for _, r := range h.machine.got {
			if r.Role != "site" {
				continue
			}
			drivers, err := CommandDrivers(tx, n, run, r.Target.Step, r.Kind)
			if err != nil {
				t.Fatal(err)
			}
			got[strings.TrimPrefix(r.ID, run.ID+":")] = fmt.Sprintf("%s %s %s", drivers["power"].Driver, drivers["power"].Config, drivers["boot"].Driver)
		}
		return nil
	})
	want := map[string]string{
		"main.0:a1:pxe":     `redfish {"address":"https://10.0.0.5","credentialRef":"secret://bmc/n1"} ipxe`,
		"main.0:a1:prepare": `redfish {"address":"https://10.0.0.5","credentialRef":"secret://bmc/n1"} ipxe`,
		"main.0:a1:cycle":   `redfish {"address":"https://10.0.0.5","credentialRef":"secret://bmc/n1"} ipxe`,
		"main.1:a1":         `ipmi {"address":"https://10.0.0.5","credentialRef":"secret://bmc/n1","port":623} uefi-http`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("power and boot bindings of each site command (-want +got):\n%s", diff)
	}
	// The node's own bindings did not change.
	if n.Drivers["power"].Driver != "redfish" || n.Drivers["boot"].Driver != "ipxe" {
		t.Errorf("the node's bindings changed: %+v", n.Drivers)
	}
}
