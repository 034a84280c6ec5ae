package testkit

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/better-compute/better-compute/"

// rule says which project packages the packages under a prefix may not import.
type rule struct {
	from   string
	forbid []string
	why    string
}

// rules are the one-way import flow of docs/ARCHITECTURE.md.
var rules = []rule{
	{"proto", []string{"registry", "agent", "boot", "cache", "bmc", "ramdisk", "hostconverge", "hardware", "cli", "fsutil", "fetch", "clock", "testkit"}, "proto is the shared leaf: it imports nothing of the project but proto"},
	{"fsutil", []string{"proto", "jsondoc", "labelexpr", "registry", "agent", "boot", "cache", "bmc", "ramdisk", "hostconverge", "hardware", "cli", "fetch", "clock", "testkit"}, "fsutil is a leaf"},
	{"fetch", []string{"registry", "agent", "boot", "cache", "bmc", "ramdisk", "hostconverge", "hardware", "cli", "fsutil", "testkit"}, "fetch is a shared agent-side leaf: it imports nothing of the project but proto and clock"},
	{"hardware", []string{"registry", "agent", "boot", "cache", "bmc", "ramdisk", "hostconverge", "fetch", "cli", "fsutil", "clock", "testkit"}, "hardware is a shared agent-side leaf: it imports nothing of the project but proto"},
	{"jsondoc", []string{"registry", "agent", "boot", "cache", "bmc", "ramdisk", "hostconverge", "hardware", "cli", "fsutil", "fetch", "clock", "labelexpr", "testkit"}, "jsondoc is a general library: it imports nothing of the project but proto"},
	{"labelexpr", []string{"registry", "agent", "boot", "cache", "bmc", "ramdisk", "hostconverge", "hardware", "cli", "fsutil", "fetch", "clock", "jsondoc", "testkit"}, "labelexpr is a general library: it imports nothing of the project but proto"},
	{"cmdline", []string{"registry", "agent", "boot", "cache", "bmc", "ramdisk", "hostconverge", "hardware", "cli", "fsutil", "fetch", "clock", "jsondoc", "labelexpr", "testkit"}, "cmdline is the shared shape of both command lines: it imports nothing of the project but proto"},
	{"sectionpack", []string{"registry", "agent", "boot", "cache", "bmc", "ramdisk", "hostconverge", "hardware", "cli", "fsutil", "fetch", "clock", "jsondoc", "labelexpr", "cmdline", "testkit"}, "sectionpack is the stored form of an inventory section, shared by the registry's store and the site agent: it imports nothing of the project but proto"},
	{"lograte", []string{"proto", "registry", "agent", "boot", "cache", "bmc", "ramdisk", "hostconverge", "hardware", "cli", "fsutil", "fetch", "clock", "jsondoc", "labelexpr", "testkit"}, "lograte is a shared leaf of the registry and the agents: it imports nothing of the project"},
	{"metricshttp", []string{"registry", "agent", "boot", "cache", "bmc", "ramdisk", "hostconverge", "hardware", "cli", "fsutil", "fetch", "clock", "jsondoc", "labelexpr", "cmdline", "sectionpack", "lograte", "testkit"}, "metricshttp is the /metrics listener the registry and the agents share: it imports nothing of the project but proto"},
	{"clock", []string{"proto", "registry", "agent", "boot", "cache", "bmc", "ramdisk", "hostconverge", "hardware", "cli", "fsutil", "fetch", "jsondoc", "labelexpr", "testkit"}, "clock is a shared leaf of the registry and the agents: it imports nothing of the project"},
	{"registry", []string{"agent", "boot", "cache", "bmc", "ramdisk", "hostconverge", "hardware", "fetch", "cli", "testkit"}, "the registry never imports agent-side rooms"},
	{"registry/seal", []string{"proto", "registry", "fsutil", "clock", "jsondoc", "labelexpr", "testkit"}, "registry/seal is a leaf: the AES-256-GCM sealing registry/pki and registry/secret share imports nothing of the project"},
	{"registry/attest", []string{"registry/store", "registry/workflow", "registry/metal", "registry/agents", "registry/api"}, "registry/attest reads signed results from proto (and jsondoc, its strict decoder) alone, so the agent endpoint and the CLI both use it"},
	{"agent", []string{"registry", "cli", "testkit"}, "agent-side rooms never import the registry"},
	{"boot", []string{"registry", "cli", "testkit"}, "agent-side rooms never import the registry"},
	{"boot", []string{"agent"}, "a library never imports an agent mode: what both need lives in proto or a shared leaf"},
	{"cache", []string{"registry", "cli", "testkit"}, "agent-side rooms never import the registry"},
	{"cache", []string{"agent"}, "a library never imports an agent mode: what both need lives in proto or a shared leaf"},
	{"bmc", []string{"registry", "cli", "testkit"}, "agent-side rooms never import the registry"},
	{"bmc", []string{"agent"}, "a library never imports an agent mode: what both need lives in proto or a shared leaf"},
	{"ramdisk", []string{"registry", "cli", "testkit"}, "agent-side rooms never import the registry"},
	{"ramdisk", []string{"agent"}, "a library never imports an agent mode: what both need lives in proto or a shared leaf"},
	{"hostconverge", []string{"registry", "cli", "testkit"}, "agent-side rooms never import the registry"},
	{"hostconverge", []string{"agent"}, "a library never imports an agent mode: what both need lives in proto or a shared leaf"},
	{"better-compute", []string{"testkit"}, "binaries never carry test helpers"},
	{"bcd", []string{"testkit", "registry"}, "bcd carries no registry code and no test helpers"},
	{"cli", []string{"testkit"}, "binaries never carry test helpers"},
}

// only says which packages of a room the packages under a prefix may import: none of
// the room's others.
type only struct {
	from  string
	room  string
	allow []string
	why   string
}

// onlies are the rooms reached through one door.
var onlies = []only{
	{"cli", "registry", []string{"registry", "registry/api"}, "the CLI reads the registry's answers as registry/api's views (and proto), never as storage rows or another room's types; serve runs the registry through its root (registry.Run)"},
	{"registry/console", "registry", []string{"registry/api"}, "the console shows only what the API answers the signed-in credential: it reaches the registry through registry/api's handler and views, never the store or another room"},
}

// prometheusRooms are the packages that may import the Prometheus client: each side's
// metrics room defines the collectors, the others count through interfaces.
var prometheusRooms = []string{"registry/metrics", "agent/metrics"}

func under(pkg, room string) bool { return pkg == room || strings.HasPrefix(pkg, room+"/") }

// TestImportRules checks every package's imports (tests excluded) against the rules.
func TestImportRules(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps=false", "-json", "./...")
	cmd.Dir = moduleRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Doc        string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkg, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok {
			continue
		}
		checked++
		if p.Doc == "" {
			t.Errorf("%s has no package doc comment: say what the room is for", pkg)
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "github.com/prometheus/") && !slices.Contains(prometheusRooms, pkg) {
				t.Errorf("%s imports %s: only %v define metrics; count through an interface of your room", pkg, imp, prometheusRooms)
			}
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			for _, o := range onlies {
				if under(pkg, o.from) && under(dep, o.room) && !slices.Contains(o.allow, dep) {
					t.Errorf("%s imports %s: %s", pkg, dep, o.why)
				}
			}
			for _, r := range rules {
				if !under(pkg, r.from) {
					continue
				}
				for _, f := range r.forbid {
					if under(dep, f) && !under(dep, r.from) {
						t.Errorf("%s imports %s: %s", pkg, dep, r.why)
					}
				}
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked only %d packages", checked)
	}
}
