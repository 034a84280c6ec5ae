package site

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// TestOutOfBandLifecycle walks a machine of a pool whose machines run no agent
// (agent: none) through its lifecycle, driven only through its Redfish BMC by the real
// registry and `bcd site`: the -oob profiles run (inspect.oob; power off; media.eject and
// power off; power off and the identity revoked), and a rescue fails the node with
// UNSUPPORTED.
func TestOutOfBandLifecycle(t *testing.T) {
	work, dataDir := t.TempDir(), t.TempDir()
	sim := redfishsim.New(redfishsim.Config{Username: "admin", Password: "hunter2"})
	t.Cleanup(sim.Close)
	pin, err := joinwire.Pin(sim.Certificate.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	bmcOptions := fmt.Sprintf(`{"driver": "redfish", "config": {"options": {"tlsPin": %q, "pollInterval": "20ms"}}}`, pin)
	testkit.WriteFile(t, filepath.Join(dataDir, "hardware-profiles.json"), []byte(`{"version": 1, "hardwareProfiles": {"sim": {"drivers": {
		"power": `+bmcOptions+`, "management": `+bmcOptions+`, "virtual-media": `+bmcOptions+`}}}}`), 0o600)
	reg := testkit.StartRegistry(t, dataDir, "--agent-listen", "127.0.0.1:0")
	admin := reg.AdminConfig
	// The site lets its BMCs mount the power-on profile's iso (media.insert's url).
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "127.0.0.1/32", "--image-sources", "isos.example")
	startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache")})
	putSecret(t, admin, work, "secret://rack-bmc", `{"username": "admin", "password": "hunter2"}`)
	testkit.JSON(t, admin, nil, "pools", "create", "oob", "--site", "rack-a", "--policy", writeDoc(t, work, `{"hardwareProfile": "sim", "agent": "none"}`))
	testkit.JSON(t, admin, nil, "profiles", "create", writeDoc(t, work, powerOn))
	var n store.Node
	testkit.JSON(t, admin, &n, "nodes", "enroll", "--pool", "oob", "--mac", "52:54:00:77:00:01", "--bmc-driver", "redfish",
		"--bmc-address", sim.URL, "--bmc-credential", "secret://rack-bmc")
	id := n.ID
	waitNode(t, admin, id, store.NodeReady)

	wait := func(want string, args ...string) string {
		t.Helper()
		res := testkit.CLI(t, admin, append(append([]string{"nodes"}, args...), "--wait")...)
		if res.Code != 0 || !strings.Contains(res.Stdout, "; node "+id+" is "+want) {
			t.Fatalf("nodes %s: exit %d\n%s\n%s", args[0], res.Code, res.Stdout, res.Stderr)
		}
		return res.Stdout
	}
	if out := wait(store.NodeReady, "inspect", id); !strings.Contains(out, "running metal-inspect-oob@1") || !strings.Contains(out, "inspect.oob") {
		t.Errorf("inspect of an agent: none pool:\n%s", out)
	}
	if out := wait(store.NodeReady, "commission", id); !strings.Contains(out, "running metal-commission-oob@1") || sim.PowerState() != "Off" {
		t.Errorf("commission: power %s\n%s", sim.PowerState(), out)
	}
	wait(store.NodeActive, "deploy", id, "--profile", "power-on")
	if m := sim.Media(); sim.PowerState() != "On" || !m.Inserted {
		t.Fatalf("after the deploy: power %s, media %+v", sim.PowerState(), m)
	}
	if e := testkit.Fails(t, admin, "nodes", "rescue", id); e.Code != "UNSUPPORTED" {
		t.Errorf("rescue of an agent: none machine: %+v", e)
	}
	testkit.JSON(t, admin, &n, "nodes", "get", id)
	if n.State != store.NodeFailed || n.FailedFrom != store.NodeRescue || n.Failure == nil || n.Failure.Error.Code != "UNSUPPORTED" {
		t.Errorf("after the rescue: %s from %s, %+v", n.State, n.FailedFrom, n.Failure)
	}
	if out := wait(store.NodeReady, "release", id); !strings.Contains(out, "running metal-release-oob@1") || sim.Media().Inserted || sim.PowerState() != "Off" {
		t.Errorf("release: power %s, media %+v\n%s", sim.PowerState(), sim.Media(), out)
	}
	wait(store.NodeRetired, "retire", id)
	testkit.JSON(t, admin, &n, "nodes", "get", id)
	if n.IdentityRevokedAt.IsZero() {
		t.Errorf("the retired node's identity holds")
	}
}
