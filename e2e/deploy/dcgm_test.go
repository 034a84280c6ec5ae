package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/hardware/dcgm/dcgmtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
)

// gpuNodeRoot is the installed OS's root as bcd node reads it: the machine's firmware
// (its product UUID) and one NVIDIA H100 on PCI. The machine running the test has no
// NVIDIA GPU; bcd node looks for one under its --root, so the test presents one there.
func gpuNodeRoot(t *testing.T, productUUID string) string {
	root := t.TempDir()
	dmi := filepath.Join(root, "sys/class/dmi/id")
	if err := os.MkdirAll(dmi, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dmi, "product_uuid"), []byte(productUUID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dcgmtest.NvidiaGPU(t, root)
	return root
}

// dcgmStandIns is a directory with a stand-in dcgmi that prints the recorded output of
// a real `dcgmi diag -j` run (hardware/dcgm/testdata) and a stand-in nv-hostengine
// that makes its socket and waits to be stopped.
func dcgmStandIns(t *testing.T, recorded string) string {
	dir := t.TempDir()
	out := dcgmtest.Recorded(recorded)
	scripts := map[string]string{
		"dcgmi": `case "$*" in "diag -r 1 -j --host unix://"*) cat '` + out + `';; *) echo "unexpected: $*" >&2; exit 2;; esac`,
		"nv-hostengine": `while [ $# -gt 0 ]; do case "$1" in --domain-socket) sock="$2"; shift;; esac; shift; done
trap 'rm -f "$sock"; exit 0' TERM
touch "$sock"
while :; do sleep 1; done`,
	}
	for name, script := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestExampleProfileAcceptance deploys the specification's example profile
// (examples/ubuntu-gpu-host.json, acceptance diag.dcgm level 1) end to end on loopback:
// the installed OS's bcd node runs DCGM (a stand-in on its PATH) on the GPU its sysfs
// shows, signs the result, and the registry judges it. With DCGM passing, the node is
// active and the step's stored result carries the signed run; with a GPU failing, the
// node is failed with DRIVER_ERROR naming the test and the GPU; without DCGM, it is
// failed with UNSUPPORTED dcgm-missing, the reason shown by nodes get.
func TestExampleProfileAcceptance(t *testing.T) {
	w := newWorld(t)
	_, zst := osImage(t)
	w.register(t, "ubuntu-24.04-server@2026.09", zst, testkit.Digest(zst), true)
	w.site.cache(testkit.Digest(zst), zst, w.source("ubuntu-24.04-server@2026.09"))
	testkit.JSON(t, w.admin, nil, "profiles", "create", filepath.Join("..", "..", "examples", "ubuntu-gpu-host.json"))

	cases := []struct {
		name     string
		recorded string // the run dcgmi prints; "" puts no DCGM on the machine
		code     proto.Code
		reason   string
		failed   []proto.Failure
		says     string
	}{
		{name: "passing", recorded: "dcgm4-pass.json"},
		{name: "a GPU failing", recorded: "dcgm3-fail.json", code: proto.DriverError, reason: "tests-failed",
			failed: []proto.Failure{{Name: "Page Retirement/Row Remap", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}, {Name: "software", GPUs: []int{5}}},
			says:   "2 of 10 tests failed: Page Retirement/Row Remap (GPU 0, 1, 2, 3, 4, 5, 6, 7); software (GPU 5)"},
		{name: "no DCGM", code: proto.Unsupported, reason: "dcgm-missing", says: "no DCGM"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			uuid := "4c4c4544-0042-3510-8052-b4c04f5957" + string(rune('a'+i)) + "1"
			m := newMachine(t, uuid, 64<<20)
			m.env = []string{envNodeRoot + "=" + gpuNodeRoot(t, uuid)}
			if tc.recorded != "" {
				m.env = append(m.env, "PATH="+dcgmStandIns(t, tc.recorded)+":"+os.Getenv("PATH"))
			}
			id := w.enroll(t, "52:54:00:12:37:0"+string(rune('1'+i)), uuid, m)
			res := testkit.CLI(t, w.admin, "nodes", "deploy", id, "--profile", "ubuntu-24.04-gpu-host", "--wait")
			console, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
			var n api.NodeView
			testkit.JSON(t, w.admin, &n, "nodes", "get", id)
			if tc.code == "" {
				if res.Code != 0 || n.State != store.NodeActive {
					t.Fatalf("deploy: exit %d, node %s %+v\n%s\n%s\nconsole:\n%s", res.Code, n.State, n.Failure, res.Stdout, res.Stderr, console)
				}
				var run api.WorkflowView
				testkit.JSON(t, w.admin, &run, "workflows", "get", n.Workflow)
				var stored attest.DCGM
				step := run.Steps[len(run.Steps)-2] // the acceptance, before the cleanup
				if err := json.Unmarshal(step.Result, &stored); err != nil || !stored.Passed || stored.Level != 1 || len(stored.Tests) != 1 ||
					len(stored.Tests[0].Results) != 8 || stored.Attestation == nil {
					t.Fatalf("diag.dcgm stored %s (%v)", step.Result, err)
				}
				var signed proto.ResultPayload
				json.Unmarshal(stored.Attestation.Payload, &signed)
				if signed.NodeID != id || signed.Kind != proto.CommandDiagDCGM || !strings.HasPrefix(signed.CommandID, n.Workflow+":") {
					t.Errorf("signed payload %+v", signed)
				}
				// An auditor gets the signed run as a wipe's.
				if out := testkit.CLI(t, w.admin, "workflows", "attestation", n.Workflow, "--step", "acceptance[0]", "--out", t.TempDir()); out.Code != 0 {
					t.Errorf("workflows attestation: exit %d\n%s\n%s", out.Code, out.Stdout, out.Stderr)
				}
				// The installed OS's agent reported the machine as it sees it, the GPU included.
				ok := waitFor(t, 10*time.Second, func() bool {
					out := testkit.CLI(t, w.admin, "nodes", "inventory", id)
					return strings.Contains(out.Stdout, "0000:17:00.0  10de:2330") && strings.Contains(out.Stdout, "product UUID  "+uuid)
				})
				if !ok {
					t.Errorf("nodes inventory:\n%s", testkit.CLI(t, w.admin, "nodes", "inventory", id).Stdout)
				}
				var inv api.NodeInventory
				testkit.JSON(t, w.admin, &inv, "nodes", "inventory", id)
				var gpus []proto.GPUInfo
				for _, s := range inv.Sections {
					if s.Section == proto.SectionGPUs {
						json.Unmarshal(s.Data, &gpus)
					}
				}
				if len(gpus) != 1 || gpus[0].Device != "2330" {
					t.Errorf("nodes inventory --format json: gpus %+v", gpus)
				}
				inventoryRefusals(t, w, id)
				return
			}
			if res.Code != 1 || n.State != store.NodeFailed || n.Failure == nil || n.Failure.Use != proto.CommandDiagDCGM ||
				n.Failure.Error.Code != tc.code || n.Failure.Error.Details.Reason != tc.reason || !strings.Contains(n.Failure.Error.Message, tc.says) {
				t.Fatalf("deploy: exit %d, node %s, failure %+v\n%s\n%s\nconsole:\n%s", res.Code, n.State, n.Failure, res.Stdout, res.Stderr, console)
			}
			if diff := cmp.Diff(tc.failed, n.Failure.Error.Details.Failed); diff != "" {
				t.Errorf("details.failed (-want +got):\n%s", diff)
			}
			if out := testkit.CLI(t, w.admin, "nodes", "get", id); !strings.Contains(out.Stdout, tc.says) || !strings.Contains(out.Stdout, "(reason "+tc.reason+")") {
				t.Errorf("nodes get does not show why:\n%s", out.Stdout)
			}
		})
	}
}

// inventoryRefusals: a machine's inventory (serials, product UUID, MACs) is its
// tenant's: another tenant's credential gets NOT_FOUND, naming the root tenant does not
// help it, and a credential of the node's own tenant without compute:nodes:read is
// FORBIDDEN.
func inventoryRefusals(t *testing.T, w *world, id string) {
	dir := t.TempDir()
	testkit.JSON(t, w.admin, nil, "tenants", "create", "other")
	other, noRead := filepath.Join(dir, "other.conf"), filepath.Join(dir, "no-read.conf")
	testkit.JSON(t, w.admin, nil, "credentials", "create", "--tenant", "other", "--actions", "compute:nodes:read", "--out", other)
	testkit.JSON(t, w.admin, nil, "credentials", "create", "--tenant", "root", "--actions", "compute:profiles:read", "--out", noRead)
	for _, c := range []struct {
		name, conf, code string
		args             []string
	}{
		{"another tenant", other, "NOT_FOUND", nil},
		{"another tenant naming root", other, "", []string{"--tenant", "root"}},
		{"no compute:nodes:read", noRead, "FORBIDDEN", nil},
	} {
		e := testkit.Fails(t, c.conf, append([]string{"nodes", "inventory", id}, c.args...)...)
		if c.code != "" && e.Code != c.code || e.Code != "NOT_FOUND" && e.Code != "FORBIDDEN" || strings.Contains(e.Message, "10de") {
			t.Errorf("%s: %+v", c.name, e)
		}
	}
}
