package site

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// TestRevokedSiteAgent: a rack server running `bcd site` is stolen with its key, and
// the platform revokes the site agent's certificates through the real binaries
// (`sites revoke-identity`). The running agent's session ends and each of its hellos is
// refused (FORBIDDEN, reason revoked, which it logs), while it keeps running with its
// kept configuration; a deploy that powers a machine on through the site waits with no
// agent to take it, and the revoked agent's next hello is refused before it could be
// handed the command, so the BMC's credential never reaches it. The agent joined again
// with a site token minted after (`bcd join --role site`, then `bcd site`) takes the
// waiting power.setPower with the platform's BMC credential, and the deploy completes.
func TestRevokedSiteAgent(t *testing.T) {
	work := t.TempDir()
	reg := testkit.StartRegistry(t, t.TempDir(), "--agent-listen", "127.0.0.1:0")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "127.0.0.1/32")
	stolen := startSiteAgent(t, reg, mkdir(t, work, "stolen"), map[string]any{"dir": filepath.Join(work, "stolen-cache")})
	// The same agent, its output kept: its configuration directory is the stolen key.
	stolen.stop()
	stop, logged := testkit.StartBCDLogged(t, nil, "site", "--config", stolen.config)
	t.Cleanup(stop)
	waitFor(t, "rack-a's agent connected", func() bool { return listedAgent(t, admin).Connected })

	putSecret(t, admin, work, "secret://rack-bmc", `{"username": "admin", "password": "hunter2"}`)
	testkit.JSON(t, admin, nil, "tenants", "create", "globex")
	globex := filepath.Join(work, "globex.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "globex", "--out", globex, "--actions",
		"compute:nodes:manage,compute:nodes:read,compute:pools:manage,compute:profiles:manage,compute:profiles:read,compute:sites:manage")
	testkit.JSON(t, globex, nil, "pools", "create", "own", "--site", "rack-a")
	testkit.JSON(t, globex, nil, "profiles", "create", writeDoc(t, work, setPowerOnly))
	bmc := redfishsim.New(redfishsim.Config{Username: "admin", Password: "hunter2"})
	t.Cleanup(bmc.Close)
	pin, err := joinwire.Pin(bmc.Certificate.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	node, err := enroll(t, admin, api.EnrollRequest{TenantID: "globex", Pool: "own", MACs: []string{"52:54:00:67:00:01"},
		BMC: api.BMC{Driver: "redfish", Address: bmc.URL, CredentialRef: "secret://platform/rack-bmc"}}, pin)
	if err != nil {
		t.Fatalf("enrolling a machine whose BMC takes the platform's credential: %v", err)
	}
	// Its enrollment reads the BMC through the site agent, with the credential.
	waitNode(t, globex, node.ID, store.NodeReady)

	// A tenant cannot revoke the site's agent; the platform does.
	if e := testkit.Fails(t, globex, "sites", "revoke-identity", "rack-a"); e.Code != "FORBIDDEN" {
		t.Errorf("a tenant revoking the site's agent: %+v, want FORBIDDEN", e)
	}
	var revoked api.CertificatesRevoked
	testkit.JSON(t, admin, &revoked, "sites", "revoke-identity", "rack-a", "--reason", "rack server stolen")
	if revoked.IdentityEpoch != 1 {
		t.Errorf("sites revoke-identity: %+v, want epoch 1", revoked)
	}
	refusals := func() (n int) {
		for _, line := range strings.Split(logged(), "\n") {
			if strings.Contains(line, "refuses this agent's certificate for good") && strings.Contains(line, "rack server stolen") {
				n++
			}
		}
		return n
	}
	waitFor(t, "the revoked agent's session ended and its next hello refused", func() bool {
		return !listedAgent(t, admin).Connected && refusals() >= 2
	})

	// The deploy's power.setPower waits for a site agent; the revoked one, trying again
	// after the command was stored, is refused before any hello could hand it over.
	var started api.DeployStarted
	testkit.JSON(t, globex, &started, "nodes", "deploy", node.ID, "--profile", "set-power")
	waitFor(t, "the deploy's power.setPower running", func() bool {
		var wf api.WorkflowView
		testkit.JSON(t, globex, &wf, "workflows", "get", started.WorkflowID)
		return len(wf.Steps) > 0 && wf.Steps[0].State == store.StepRunning
	})
	before := refusals()
	waitFor(t, "one more hello of the revoked agent refused", func() bool { return refusals() > before })
	if bmc.PowerState() == "On" {
		t.Fatalf("the machine was powered on with only the revoked site agent running")
	}

	// The way back: a site token minted now, bcd join --role site, bcd site.
	startSiteAgent(t, reg, mkdir(t, work, "rejoined"), map[string]any{"dir": filepath.Join(work, "rejoined-cache")})
	waitNode(t, globex, node.ID, store.NodeActive)
	if bmc.PowerState() != "On" {
		t.Errorf("the deploy completed through the rejoined agent, the BMC's power is %s", bmc.PowerState())
	}
	if a := listedAgent(t, admin); !a.Connected {
		t.Errorf("the rejoined agent is not connected: %+v", a)
	}
}
