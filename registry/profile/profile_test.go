package profile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// specExample is the GPU host profile of the specification, as docs/profiles.md gives it
// (its first JSON block): the tests read the text the reference shows, not a copy of it.
func specExample(t *testing.T) string {
	t.Helper()
	doc := readFile(t, filepath.Join("..", "..", "docs", "profiles.md"))
	_, block, ok := strings.Cut(doc, "\n```json\n")
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed {
		t.Fatal("docs/profiles.md holds no ```json block: the specification's example profile is its first")
	}
	return block + "\n"
}

// TestExampleFileIsTheSpecExample: examples/ubuntu-gpu-host.json, which the README, the
// CLI's tests and the end-to-end deploy use, is the specification's example byte for
// byte.
func TestExampleFileIsTheSpecExample(t *testing.T) {
	if diff := cmp.Diff(specExample(t), readFile(t, filepath.Join("..", "..", "examples", "ubuntu-gpu-host.json"))); diff != "" {
		t.Errorf("examples/ubuntu-gpu-host.json differs from the example of docs/profiles.md (-docs +file):\n%s", diff)
	}
}

// TestSpecExample defines the GPU host profile of the specification.
func TestSpecExample(t *testing.T) {
	p, err := Define([]byte(specExample(t)))
	if err != nil {
		t.Fatal(err)
	}
	type summary struct {
		ID, Target, Role, Entry string
		Version                 int
		Image                   Image
		UserData                UserData
		Units                   []string
		Steps                   []string
		Acceptance, Cleanup     []string
	}
	uses := func(steps []Step) []string {
		var out []string
		for _, s := range steps {
			out = append(out, s.Use)
		}
		return out
	}
	img, _ := p.Image()
	ud, _ := p.UserData()
	var units []string
	for _, u := range p.HostConfig() {
		units = append(units, u.Name+" "+string(u.Settings))
	}
	got := summary{p.ID(), p.Target(), p.Role(), p.Entry(), p.Version(), img, ud, units,
		uses(p.Steps()), uses(p.Acceptance()), uses(p.Cleanup())}
	want := summary{
		ID: "ubuntu-24.04-gpu-host", Target: "metal", Role: "host", Entry: "deploy", Version: 1,
		Image:    Image{Ref: "ubuntu-24.04-server@2026.09", Format: "raw", Compression: "zstd"},
		UserData: UserData{Kind: "cloud-init", Template: "bcd-host.yaml.hbs"},
		Units:    []string{`nvidia-driver {"branch":"580"}`, `fabric-manager {"when":"nvswitch"}`},
		Steps: []string{"userdata.render", "boot.prepareRamdisk", "management.setBootDevice", "power.setPower",
			"wait.agentJoined", "deploy.deploy", "management.setBootDevice", "boot.kexec"},
		Acceptance: []string{"diag.dcgm"},
		Cleanup:    []string{"boot.cleanUp"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	kexec := p.Steps()[7]
	if kexec.Await != "rejoin" || kexec.Timeout != 15*time.Minute || kexec.On != Ramdisk {
		t.Errorf("boot.kexec = %+v", kexec)
	}
}

func TestProfileCannotBeChanged(t *testing.T) {
	p, err := Define([]byte(metal(`"drivers": {"boot": {"driver": "ipxe", "config": {"a": 1}}}, "hostConfig": {"iommu": {}}, "steps": [{"use": "power.setPower", "with": {"action": "off"}, "fallback": {"use": "power.setPower", "with": {"action": "cycle"}}}]`)))
	if err != nil {
		t.Fatal(err)
	}
	before := string(p.Document())

	steps := p.Steps()
	steps[0].Use = "changed"
	steps[0].With[2] = 'X'
	steps[0].Fallback.Use = "changed"
	steps[0].Fallback.With[2] = 'X'
	drivers := p.Drivers()
	drivers["boot"].Config[2] = 'X'
	drivers["power"] = Driver{Driver: "x"}
	units := p.HostConfig()
	units[0].Settings[0] = 'X'
	doc := p.Document()
	doc[0] = 'X'

	if got := p.Steps()[0]; got.Use != "power.setPower" || string(got.With) != `{"action":"off"}` || got.Fallback.Use != "power.setPower" || string(got.Fallback.With) != `{"action":"cycle"}` {
		t.Errorf("steps changed: %+v", got)
	}
	if got := p.Drivers(); len(got) != 1 || string(got["boot"].Config) != `{"a":1}` {
		t.Errorf("drivers changed: %v", got)
	}
	if got := string(p.HostConfig()[0].Settings); got != `{}` {
		t.Errorf("host config changed: %s", got)
	}
	if got := string(p.Document()); got != before {
		t.Errorf("document changed: %s", got)
	}
	if b, _ := json.Marshal(p); string(b) != before {
		t.Errorf("MarshalJSON = %s, want the document", b)
	}
}

func TestVPSHasNoMetalDefaults(t *testing.T) {
	p, err := Define([]byte(`{"id": "vm", "version": 1, "target": "vps", "image": {"ref": "os@1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Role() != "" || p.Entry() != "" || len(Render(p)) != 0 {
		t.Errorf("role %q entry %q steps %v", p.Role(), p.Entry(), Render(p))
	}
}

// TestShipped checks the shipped profiles against the specification's table.
func TestShipped(t *testing.T) {
	type row struct {
		Ref     string
		Main    []string
		Cleanup []string
	}
	uses := func(steps []Step) []string {
		var out []string
		for _, s := range steps {
			use := s.Use
			if len(s.With) > 0 {
				use += " " + string(s.With)
			}
			if s.OnFailure == onFailureContinue {
				use += " continue"
			}
			if s.Timeout != 0 {
				use += " " + formatDuration(s.Timeout)
			}
			out = append(out, use)
		}
		return out
	}
	var got []row
	for _, p := range Shipped() {
		if !strings.HasPrefix(p.ID(), "metal-") {
			continue
		}
		got = append(got, row{p.ID() + "@" + strconv.Itoa(p.Version()), uses(p.Steps()), uses(p.Cleanup())})
	}
	cleanUp := []string{"boot.cleanUp"}
	want := []row{
		{"metal-commission@1", []string{"metal.ensureRamdisk", `diag.dcgm {"level":2}`, `disk.wipe {"mode":"quick"}`, `power.setPower {"action":"off"}`}, cleanUp},
		{"metal-commission-oob@1", []string{`power.setPower {"action":"off"}`}, nil},
		{"metal-enroll@1", []string{"power.getPower", "inspect.oob"}, nil},
		{"metal-inspect@2", []string{"metal.ensureRamdisk", "inventory.refresh"}, cleanUp},
		{"metal-inspect-oob@1", []string{"inspect.oob"}, nil},
		{"metal-release@1", []string{"metal.ensureRamdisk", `disk.wipe {"mode":"quick"}`, `power.setPower {"action":"off"}`}, cleanUp},
		{"metal-release-oob@1", []string{"media.eject", `power.setPower {"action":"off"}`}, nil},
		{"metal-rescue@1", []string{"metal.ensureRamdisk"}, nil},
		{"metal-retire@1", []string{"metal.ensureRamdisk continue", `disk.wipe {"mode":"crypto-erase"} continue`, `power.setPower {"action":"off"} continue`, "metal.revokeIdentity"}, cleanUp},
		{"metal-retire-oob@1", []string{`power.setPower {"action":"off"} continue`, "metal.revokeIdentity"}, nil},
		{"metal-unrescue@1", []string{`management.setBootDevice {"device":"disk","persistent":true}`, `power.setPower {"action":"cycle"}`, `wait.agentJoined {"role":"node"} 20m`}, cleanUp},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("shipped metal profiles (-want +got):\n%s", diff)
	}
	var ids []string
	for _, p := range Shipped() {
		ids = append(ids, p.ID())
		if p.Target() != TargetMetal {
			t.Errorf("%s is not a metal profile", p.ID())
		}
	}
	for _, id := range []string{"remediate-reboot", "remediate-gpu-reset"} {
		if !strings.Contains(strings.Join(ids, " "), id) {
			t.Errorf("%s does not ship", id)
		}
	}
}
