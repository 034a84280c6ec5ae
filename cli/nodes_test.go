package cli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
)

const hardwareProfiles = `{"version": 1, "hardwareProfiles": {
  "gpu-redfish": {"drivers": {"power": "redfish", "management": "redfish", "boot": "ipxe", "deploy": "image-stream", "inspect": "agent"}}}}`

// joinsAsNode is a profile whose deploy is done when the installed OS's agent joins: its
// steps run in the registry. Its second step never runs on a node without the label
// retiring.
const joinsAsNode = `{"id": "joins-as-node", "version": 1, "target": "metal",
  "hostConfig": {"nvidia-driver": {"branch": "580"}, "hugepages": {"pages2m": 512}},
  "steps": [{"use": "wait.agentJoined", "with": {"role": "node"}, "timeout": "2m"},
            {"use": "wait.generationObserved", "when": "retiring"}]}`

const neverJoins = `{"id": "never-joins", "version": 1, "target": "metal",
  "steps": [{"use": "wait.agentJoined", "with": {"role": "node"}, "timeout": "1s"}]}`

func TestEnrollAndDeployThroughTheCLI(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hardware-profiles.json"), []byte(hardwareProfiles), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := testkit.StartRegistry(t, dir)
	admin := reg.AdminConfig

	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "10.0.0.0/24")
	if e := testkit.Fails(t, admin, "pools", "create", "gpu", "--site", "rack-a",
		"--policy", writeDoc(t, `{"hardwareProfile": "gpu-redfish", "hugepages": {"pages2m": -1}}`)); e.Code != "INVALID_INPUT" || e.Details.Path != "policy.hugepages.pages2m" {
		t.Errorf("a pool with a bad unit setting: %+v", e)
	}
	var pool store.Pool
	testkit.JSON(t, admin, &pool, "pools", "create", "gpu", "--site", "rack-a", "--prewarm", "ubuntu-24.04-server@2026.09",
		"--policy", writeDoc(t, `{"hardwareProfile": "gpu-redfish", "hugepages": {"pages1g": 8}}`))
	if pool.Site != "rack-a" || pool.Policy.HardwareProfile != "gpu-redfish" || len(pool.Policy.PrewarmImages) != 1 {
		t.Fatalf("pool %+v", pool)
	}
	testkit.JSON(t, admin, &pool, "pools", "update", "gpu", "--prewarm", "")
	if len(pool.Policy.PrewarmImages) != 0 || pool.Policy.HardwareProfile != "gpu-redfish" || pool.Policy.Hugepages == nil {
		t.Fatalf("a pool whose pre-warm list was cleared keeps the rest of its policy: %+v", pool)
	}
	for name, tc := range map[string]struct {
		flags []string
		path  string
	}{
		"an unknown agent":              {[]string{"--policy", writeDoc(t, `{"agent": "ipmi"}`)}, "policy.agent"},
		"a bad pre-warm ref":            {[]string{"--prewarm", "Bad"}, "prewarmImages[0]"},
		"a policy file's unknown field": {[]string{"--policy", writeDoc(t, "{\n  \"agent\": \"bcd\",\n  \"colour\": \"red\"\n}")}, "colour"},
		"a policy file's duplicate key": {[]string{"--policy", writeDoc(t, "{\n  \"agent\": \"bcd\",\n  \"agent\": \"none\"\n}")}, "agent"},
	} {
		e := testkit.Fails(t, admin, append([]string{"pools", "update", "gpu"}, tc.flags...)...)
		if e.Code != "INVALID_INPUT" || e.Details.Path != tc.path {
			t.Errorf("pools update, %s: %+v", name, e)
		}
		// A problem of the file says where in it: FILE:3:3.
		if strings.HasPrefix(name, "a policy file's") && !strings.Contains(e.Message, ".json:3:3") {
			t.Errorf("pools update, %s: %q does not say the file's line and column", name, e.Message)
		}
	}
	if res := testkit.CLI(t, admin, "pools", "get", "gpu"); res.Code != 0 || !strings.Contains(res.Stdout, "gpu-redfish") ||
		!strings.Contains(res.Stdout, `hugepages  {"pages1g":8}`) {
		t.Errorf("pools get table: %s %s", res.Stdout, res.Stderr)
	}
	enroll := func(mac string, extra ...string) []string {
		return append([]string{"nodes", "enroll", "--pool", "gpu", "--mac", mac, "--bmc-driver", "redfish",
			"--bmc-address", "https://10.0.0.5", "--bmc-credential", "secret://bmc/n1"}, extra...)
	}
	if e := testkit.Fails(t, admin, enroll("52:54:00:00:00:01", "--hardware-profile", "nope")...); e.Code != "INVALID_INPUT" || e.Details.Path != "hardwareProfile" {
		t.Errorf("an unknown hardware profile: %+v", e)
	}
	// A driver no site has (the MAC is then free: the refusal stored nothing).
	if e := testkit.Fails(t, admin, enroll("52:54:00:00:00:01", "--bmc-driver", "ipmi")...); e.Code != "INVALID_INPUT" || e.Details.Path != "bmc.driver" || !strings.Contains(e.Message, "redfish, qmp") {
		t.Errorf("an unknown BMC driver: %+v, want INVALID_INPUT at bmc.driver listing redfish, qmp", e)
	}
	var node store.Node
	testkit.JSON(t, admin, &node, enroll("52:54:00:00:00:01", "--label", "gpu.vendor=nvidia")...)
	if node.State != store.NodeEnrolling || node.Drivers["boot"].Driver != "ipxe" ||
		compact(t, node.Drivers["power"].Config) != `{"address":"https://10.0.0.5","credentialRef":"secret://bmc/n1"}` {
		t.Fatalf("enrolled %+v", node)
	}
	if e := testkit.Fails(t, admin, enroll("52:54:00:00:00:01")...); e.Code != "CONFLICT" {
		t.Errorf("the same MAC again: %+v", e)
	}
	testkit.JSON(t, admin, nil, "profiles", "create", writeDoc(t, joinsAsNode), "--tenant", "root")
	// An enrolling node does not deploy; once the site has read its BMC it is ready.
	if e := testkit.Fails(t, admin, "nodes", "deploy", node.ID, "--profile", "joins-as-node"); e.Code != "INVALID_STATE" || e.Details.Reason != store.NodeEnrolling {
		t.Errorf("deploying an enrolling node: %+v", e)
	}
	testkit.JSON(t, admin, nil, "secrets", "put", "--ref", "secret://bmc/n1", "--file", writeDoc(t, `{"username": "admin", "password": "x"}`))
	answeringSite(t, reg, "rack-a")
	waitState(t, admin, node.ID, store.NodeReady)

	// A node no workflow took from an installed OS is at identity epoch 0; `nodes get`
	// shows the epoch and when it was raised, in JSON and as text.
	epoch := func(want int64, text func(api.NodeView) string) {
		t.Helper()
		var v api.NodeView
		testkit.JSON(t, admin, &v, "nodes", "get", node.ID)
		res := testkit.CLI(t, admin, "nodes", "get", node.ID)
		if v.IdentityEpoch != want || (want == 0) != v.IdentityEpochAt.IsZero() || (want > 0 && v.IdentityEpochAt.Before(v.CreatedAt)) || !strings.Contains(res.Stdout, text(v)) {
			t.Errorf("nodes get: identity epoch %d raised at %v (created %v), text:\n%s\nwant epoch %d and %q", v.IdentityEpoch, v.IdentityEpochAt, v.CreatedAt, res.Stdout, want, text(v))
		}
	}
	epoch(0, func(api.NodeView) string { return "\nidentity epoch 0: never raised" })

	// Deploy and follow; the workflow waits for the installed OS to join as the node.
	done := make(chan testkit.Result, 1)
	go func() {
		done <- testkit.CLI(t, admin, "nodes", "deploy", node.ID, "--profile", "joins-as-node", "--wait")
	}()
	waitStep(t, admin, node.ID, store.StepRunning)
	token := mintToken(t, admin, node.ID)
	if res := testkit.BCD(t, joinArgs(t, reg, node.ID, token)...); res.Code != 0 {
		t.Fatalf("bcd join: exit %d\n%s", res.Code, res.Stderr)
	}
	var res testkit.Result
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatal("nodes deploy --wait did not end")
	}
	if res.Code != 0 {
		t.Fatalf("nodes deploy --wait: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	want := []string{
		"workflow * deploying joins-as-node@1 on node " + node.ID,
		"steps[0] wait.agentJoined control-plane running",
		"steps[0] wait.agentJoined control-plane succeeded *",
		"steps[1] wait.generationObserved control-plane skipped (when retiring does not hold for the node's labels)",
		"workflow * succeeded; node " + node.ID + " is active",
	}
	if diff := cmp.Diff(want, followLines(res.Stdout)); diff != "" {
		t.Errorf("nodes deploy --wait output (-want +got):\n%s\n%s", diff, res.Stdout)
	}
	testkit.JSON(t, admin, &node, "nodes", "get", node.ID)
	// The deploy raised the epoch as it started: the OS it installed joined in epoch 1.
	epoch(1, func(v api.NodeView) string {
		return "\nidentity epoch 1, raised " + v.IdentityEpochAt.Format(time.RFC3339) + ": agent certificates of earlier epochs are refused"
	})
	var host []string
	for _, u := range node.Host {
		host = append(host, u.Unit+" "+compact(t, u.Settings))
	}
	if diff := cmp.Diff([]string{`hugepages {"pages1g":8}`, `nvidia-driver {"branch":"580"}`}, host); diff != "" || node.State != store.NodeActive || node.Profile == nil || !node.IdentityRevokedAt.IsZero() {
		t.Errorf("deployed node %s %+v, host (-want +got):\n%s", node.State, node.Profile, diff)
	}
	if e := testkit.Fails(t, admin, "profiles", "update", "joins-as-node", "--file", writeDoc(t, strings.Replace(joinsAsNode, "580", "575", 1))); e.Code != "INVALID_STATE" {
		t.Errorf("updating the deployed version: %+v", e)
	}
	var wf api.WorkflowView
	testkit.JSON(t, admin, &wf, "workflows", "get", node.Workflow)
	if wf.State != store.RunSucceeded || len(wf.Steps) != 2 || wf.Steps[1].State != store.StepSkipped {
		t.Errorf("workflow %+v", wf)
	}

	// An active node is released before it deploys again.
	if e := testkit.Fails(t, admin, "nodes", "deploy", node.ID, "--profile", "joins-as-node"); e.Code != "INVALID_STATE" || e.Details.Reason != store.NodeActive ||
		!strings.Contains(e.Message, "nodes release "+node.ID) {
		t.Errorf("deploying an active node: %+v", e)
	}

	// A deploy whose step fails leaves the node failed with the step and its error.
	var other store.Node
	testkit.JSON(t, admin, &other, enroll("52:54:00:00:00:02")...)
	waitState(t, admin, other.ID, store.NodeReady)
	testkit.JSON(t, admin, nil, "profiles", "create", writeDoc(t, neverJoins))
	res = testkit.CLI(t, admin, "nodes", "deploy", other.ID, "--profile", "never-joins", "--wait")
	if res.Code != 1 || !strings.Contains(res.Stderr, "error: TIMEOUT: steps[0]: wait.agentJoined did not finish within its timeout of 1s") {
		t.Errorf("a failing deploy: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	testkit.JSON(t, admin, &other, "nodes", "get", other.ID)
	if f := other.Failure; other.State != store.NodeFailed || f == nil || f.Step != "steps[0]" || f.Use != "wait.agentJoined" || f.Error.Code != "TIMEOUT" {
		t.Errorf("failed node %s %+v", other.State, other.Failure)
	}
	var list api.NodeList
	testkit.JSON(t, admin, &list, "nodes", "list", "--pool", "gpu")
	if len(list.Nodes) != 2 {
		t.Errorf("list: %+v", list)
	}
	if res := testkit.CLI(t, admin, "nodes", "get", other.ID); res.Code != 0 || !strings.Contains(res.Stdout, "failed from deploying at steps[0] wait.agentJoined") ||
		!strings.Contains(res.Stdout, "last transition deploy, workflow "+other.Workflow) {
		t.Errorf("nodes get table: %s %s", res.Stdout, res.Stderr)
	}
	testkit.JSON(t, admin, &list, "nodes", "list", "--state", store.NodeFailed)
	if len(list.Nodes) != 1 || list.Nodes[0].ID != other.ID {
		t.Errorf("list --state failed: %+v", list)
	}
	if e := testkit.UsageFails(t, admin, "nodes", "list", "--state", "enrolled"); e.Code != "INVALID_INPUT" || e.Details.Path != "--state" || !strings.Contains(e.Message, "give one of enrolling") {
		t.Errorf("list --state enrolled: %+v", e)
	}

	// A third node's deploy waits for an agent that never joins: cancelling it abandons
	// the wait and fails the node with reason cancelled, at once.
	var third store.Node
	testkit.JSON(t, admin, &third, enroll("52:54:00:00:00:03")...)
	waitState(t, admin, third.ID, store.NodeReady)
	testkit.JSON(t, admin, nil, "nodes", "deploy", third.ID, "--profile", "joins-as-node")
	waitStep(t, admin, third.ID, store.StepRunning)
	if e := testkit.Fails(t, admin, "nodes", "retire", third.ID); e.Code != "INVALID_STATE" || e.Details.Reason != store.NodeDeploying {
		t.Errorf("a second request while the deploy runs: %+v", e)
	}
	res = testkit.CLI(t, admin, "nodes", "cancel", third.ID, "--wait")
	if res.Code != 1 || !strings.Contains(res.Stderr, "error: INVALID_STATE: steps[0]: workflow") || !strings.Contains(res.Stdout, "node "+third.ID+" is failed") {
		t.Errorf("nodes cancel --wait: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	testkit.JSON(t, admin, &third, "nodes", "get", third.ID)
	if f := third.Failure; third.State != store.NodeFailed || third.FailedFrom != store.NodeDeploying || f == nil || f.Error.Details.Reason != "cancelled" {
		t.Errorf("cancelled node %s from %s, %+v", third.State, third.FailedFrom, third.Failure)
	}
	if e := testkit.Fails(t, admin, "nodes", "cancel", third.ID); e.Code != "INVALID_STATE" || e.Details.Reason != store.NodeFailed {
		t.Errorf("cancelling a failed node: %+v", e)
	}
}

// answeringSite joins a site agent for site that answers the BMC reads of metal-enroll
// (power.getPower, inspect.oob) with {}: the machine is on, and its BMC tells nothing
// more. Other site commands are UNSUPPORTED.
func answeringSite(t *testing.T, reg *testkit.Registry, site string) {
	t.Helper()
	answeringSiteReporting(t, reg, site, nil)
}

// answeringSiteReporting is answeringSite whose agent reports inventory (a
// `discoveries` section: machines its boot server saw) in its hello.
func answeringSiteReporting(t *testing.T, reg *testkit.Registry, site string, inventory map[string]json.RawMessage) {
	t.Helper()
	on := func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }
	siteAgent(t, reg, site, inventory, map[string]session.Handler{"power.getPower": on, "inspect.oob": on})
}

// siteAgent joins a site agent for site whose session runs handlers, reporting inventory
// in its hello, until the test ends.
func siteAgent(t *testing.T, reg *testkit.Registry, site string, inventory map[string]json.RawMessage, handlers map[string]session.Handler) {
	t.Helper()
	creds, err := bcdconf.LoadAgent(testkit.JoinSite(t, reg, site))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	agent, err := session.New(session.Config{Addr: creds.Config.AgentEndpoint, Certificate: creds.Certificate, ServerCAs: creds.ServingCAs,
		Inventory: inventory, Handlers: handlers, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { agent.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitState waits until the node is in state and returns it.
func waitState(t *testing.T, config, node, state string) store.Node {
	t.Helper()
	var n store.Node
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if testkit.JSON(t, config, &n, "nodes", "get", node); n.State == state {
			return n
		} else if n.State == store.NodeFailed {
			break
		}
	}
	t.Fatalf("node %s is %s (%+v), never %s", node, n.State, n.Failure, state)
	return n
}

// waitStep waits until the first step of the node's workflow is in state.
func waitStep(t *testing.T, config, node, state string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var n store.Node
		testkit.JSON(t, config, &n, "nodes", "get", node)
		if n.Workflow != "" {
			var wf api.WorkflowView
			testkit.JSON(t, config, &wf, "workflows", "get", n.Workflow)
			if wf.Steps[0].State == state {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the first step of node %s's workflow never became %s", node, state)
}

func mintToken(t *testing.T, config, node string) string {
	t.Helper()
	var made struct{ Token string }
	testkit.JSON(t, config, &made, "tokens", "create", "--kind", "provisioned", "--node-id", node, "--site", "rack-a")
	return made.Token
}

// joinArgs writes the token to a file and returns `bcd join`'s arguments for the node.
func joinArgs(t *testing.T, reg *testkit.Registry, node, token string) []string {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "join-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"join", "--server", reg.URL, "--token-file", tokenFile, "--node-id", node, "--role", "node",
		"--config-dir", filepath.Join(dir, "etc-bcd"), "--serving-ca-pin", reg.Pins.ServingCA,
		"--join-signing-pin", reg.Pins.JoinSigning, "--join-encryption-pin", reg.Pins.JoinEncryption}
}

// followLines normalizes --wait's output: fields joined by one space, the workflow id
// and durations replaced by *.
func followLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		for i, w := range f {
			if strings.HasPrefix(w, "wf_") || i == 4 && strings.HasSuffix(w, "s") && f[3] == "succeeded" {
				f[i] = "*"
			}
			f[i] = strings.TrimSuffix(f[i], ":")
		}
		lines = append(lines, strings.Join(f, " "))
	}
	return lines
}

func compact(t *testing.T, raw []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestADeployResumesAfterTheRegistryIsKilled(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hardware-profiles.json"), []byte(hardwareProfiles), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := testkit.StartRegistry(t, dir)
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "10.0.0.0/24")
	testkit.JSON(t, admin, nil, "pools", "create", "gpu", "--site", "rack-a", "--policy", writeDoc(t, `{"hardwareProfile": "gpu-redfish"}`))
	var node store.Node
	testkit.JSON(t, admin, &node, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "https://10.0.0.5")
	answeringSite(t, reg, "rack-a")
	waitState(t, admin, node.ID, store.NodeReady)
	testkit.JSON(t, admin, nil, "profiles", "create", writeDoc(t, joinsAsNode))
	var started api.DeployStarted
	testkit.JSON(t, admin, &started, "nodes", "deploy", node.ID, "--profile", "joins-as-node")
	waitStep(t, admin, node.ID, store.StepRunning)

	reg.Kill()
	reg = testkit.StartRegistry(t, dir)
	token := mintToken(t, admin, node.ID)
	if res := testkit.BCD(t, joinArgs(t, reg, node.ID, token)...); res.Code != 0 {
		t.Fatalf("bcd join: exit %d\n%s", res.Code, res.Stderr)
	}
	deadline := time.Now().Add(30 * time.Second)
	for node.State != store.NodeActive && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		testkit.JSON(t, admin, &node, "nodes", "get", node.ID)
	}
	var wf api.WorkflowView
	testkit.JSON(t, admin, &wf, "workflows", "get", started.WorkflowID)
	if node.State != store.NodeActive || wf.State != store.RunSucceeded || len(wf.Steps[0].Attempts) != 1 {
		t.Errorf("after the restart: node %s, workflow %s %+v", node.State, wf.State, wf.Steps[0])
	}
}

// TestEnrollConflictHidesAnotherTenantsNode enrolls, as tenant beta, a machine tenant
// acme enrolled: CONFLICT, and nothing in the answer names acme's node.
func TestEnrollConflictHidesAnotherTenantsNode(t *testing.T) {
	configs := acmeAndBeta(t, testkit.StartRegistry(t, "").AdminConfig, "compute:nodes:manage,compute:nodes:read")
	enroll := func(mac string) []string {
		return []string{"nodes", "enroll", "--pool", "gpu", "--mac", mac, "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2"}
	}
	var node store.Node
	testkit.JSON(t, configs["acme"], &node, enroll("52:54:00:00:00:01")...)

	res := testkit.CLI(t, configs["beta"], append(enroll("52:54:00:00:00:01"), "--format", "json")...)
	var e testkit.ErrorObject
	json.Unmarshal([]byte(res.Stdout), &e)
	if res.Code != 1 || e.Code != "CONFLICT" || e.Details.Path != "macs" || strings.Contains(res.Stdout+res.Stderr, node.ID) || strings.Contains(res.Stdout+res.Stderr, "nd_") {
		t.Errorf("beta enrolling acme's machine: exit %d\n%s%s\nwant CONFLICT at macs naming no node of acme (%s)", res.Code, res.Stdout, res.Stderr, node.ID)
	}
	if e := testkit.Fails(t, configs["acme"], enroll("52:54:00:00:00:01")...); e.Code != "CONFLICT" || !strings.Contains(e.Message, node.ID) {
		t.Errorf("acme enrolling its own machine again: %+v, want its node named", e)
	}
}

// TestAProductUUIDIsOneMachineInEitherSpelling: tenant acme enrolls a machine by its
// product UUID as DHCP option 97 sends it; tenant beta, which learned the UUID (the
// machine broadcasts it on the provisioning network), enrolls the same machine in the
// spelling dmidecode, Redfish and the site's PXE discovery use, on a pool of its own
// that trusts its provisioning network. Beta's enrollment is CONFLICT at productUuid
// naming no node of acme's, and when the site reports the machine network-booting, its
// MAC is proposed to acme's node and to no node of beta's. Before, beta's node was
// enrolled and got the machine's MAC bound at once, and with it the machine's ramdisk
// boots: beta's deploy would have run on acme's machine. Likewise beta enrolls, by its
// UUID, a machine acme enrolled by its MAC alone: when the site reports it, beta's node
// is proposed nothing (before, it was shown acme's machine's MAC and when it booted).
func TestAProductUUIDIsOneMachineInEitherSpelling(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	configs := acmeAndBeta(t, reg.AdminConfig, "compute:nodes:manage,compute:nodes:read,compute:pools:manage")
	const sent, dmidecode, mac = "78563412-bc9a-f0de-1122-334455667788", "12345678-9abc-def0-1122-334455667788", "52:54:00:00:00:07"
	const otherUUID, otherMAC = "22345678-9abc-def0-1122-334455667788", "52:54:00:00:00:08"
	policy := filepath.Join(t.TempDir(), "trusting.json")
	if err := os.WriteFile(policy, []byte(`{"trustProvisioningNetwork": true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.JSON(t, configs["beta"], nil, "pools", "create", "trusting", "--site", "rack-a", "--policy", policy)
	var acmes store.Node
	testkit.JSON(t, configs["acme"], &acmes, "nodes", "enroll", "--pool", "gpu", "--product-uuid", sent, "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")

	res := testkit.CLI(t, configs["beta"], "nodes", "enroll", "--pool", "trusting", "--product-uuid", dmidecode,
		"--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.3", "--format", "json")
	var e testkit.ErrorObject
	json.Unmarshal([]byte(res.Stdout), &e)
	if res.Code != 1 || e.Code != "CONFLICT" || e.Details.Path != "productUuid" || strings.Contains(res.Stdout+res.Stderr, "nd_") {
		t.Errorf("beta enrolling acme's machine in the other spelling: exit %d\n%s%s\nwant CONFLICT at productUuid naming no node of acme (%s)",
			res.Code, res.Stdout, res.Stderr, acmes.ID)
	}
	testkit.JSON(t, configs["acme"], nil, "nodes", "enroll", "--pool", "gpu", "--mac", otherMAC, "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")
	testkit.JSON(t, configs["beta"], nil, "nodes", "enroll", "--pool", "trusting", "--product-uuid", otherUUID, "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.3")

	seen := time.Now().UTC().Truncate(time.Second)
	discovered, _ := json.Marshal([]proto.Discovery{{MAC: mac, ProductUUID: dmidecode, FirstSeen: seen, LastSeen: seen},
		{MAC: otherMAC, ProductUUID: otherUUID, FirstSeen: seen, LastSeen: seen}})
	answeringSiteReporting(t, reg, "rack-a", map[string]json.RawMessage{proto.SectionDiscoveries: discovered})
	holds := func(n api.Node) bool {
		return slices.Contains(n.MACs, mac) || n.MACProposal != nil && n.MACProposal.MAC == mac
	}
	var acmeList, betaList api.NodeList
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		testkit.JSON(t, configs["acme"], &acmeList, "nodes", "list")
		testkit.JSON(t, configs["beta"], &betaList, "nodes", "list")
		if slices.ContainsFunc(acmeList.Nodes, holds) || slices.ContainsFunc(betaList.Nodes, holds) {
			break
		}
	}
	if !slices.ContainsFunc(acmeList.Nodes, holds) {
		t.Errorf("acme's node %s never got the MAC its machine booted from", acmes.ID)
	}
	for _, n := range betaList.Nodes {
		if holds(n) || n.MACProposal != nil {
			t.Errorf("beta's node %s holds or is shown a MAC of acme's machines: macs %v, proposal %+v", n.ID, n.MACs, n.MACProposal)
		}
	}
}

// TestTenantsNameNoFileOfTheSiteHost: tenant beta names a file of the site host as its
// BMC's CA file (the redfish driver's options.caFile), which the shared site agent would
// read for each of its node's BMC commands: /dev/zero (read without end, the agent runs
// out of memory and every tenant's site with it) and a file of the site host (its
// answer tells whether it exists and what it holds). Through an enrollment's driver
// overrides it is FORBIDDEN at the option's path, and through a profile's drivers
// INVALID_INPUT there; neither leaves a node or a profile. The platform (a root-tenant
// credential enrolling for beta) still names one. Before, both were taken, and the site
// read the file at the node's enrollment.
func TestTenantsNameNoFileOfTheSiteHost(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	configs := acmeAndBeta(t, reg.AdminConfig, "compute:nodes:manage,compute:nodes:read,compute:profiles:manage,compute:profiles:read")
	beta, ctx := testkit.Client(t, configs["beta"]), context.Background()
	for _, file := range []string{"/dev/zero", "/var/lib/bcd/agent.key"} {
		options := fmt.Appendf(nil, `{"options": {"caFile": %q}}`, file)
		req := api.EnrollRequest{Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}, BMC: api.BMC{Driver: "redfish", Address: "https://127.0.0.3"},
			Drivers: map[string]api.Binding{"power": {Driver: "redfish", Config: options}}}
		var node api.Node
		err := beta.Call(ctx, "metal.enroll", req, &node)
		if e := proto.CodeOf(err); e != proto.Forbidden || proto.AsError(err).Details.Path != "drivers.power.config.options.caFile" || proto.AsError(err).Details.Reason != proto.ReasonSiteHostFile {
			t.Errorf("beta enrolling with options.caFile %s: %v (node %s), want FORBIDDEN at drivers.power.config.options.caFile", file, err, node.ID)
		}
		doc := strings.Replace(flatcarHost("host"), `"steps"`, `"drivers": {"power": {"driver": "redfish", "config": `+string(options)+`}}, "steps"`, 1)
		err = beta.Call(ctx, "profiles.create", api.CreateProfileRequest{Document: api.Document(doc)}, nil)
		if proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "drivers.power.config.options.caFile" {
			t.Errorf("beta's profile with options.caFile %s: %v, want INVALID_INPUT at drivers.power.config.options.caFile", file, err)
		}
	}
	var nodes api.NodeList
	var profiles api.ProfileList
	if testkit.JSON(t, configs["beta"], &nodes, "nodes", "list"); len(nodes.Nodes) != 0 {
		t.Errorf("beta's refused enrollments left nodes: %+v", nodes.Nodes)
	}
	if testkit.JSON(t, configs["beta"], &profiles, "profiles", "list"); slices.ContainsFunc(profiles.Profiles, func(p api.ProfileView) bool { return p.ID == "host" }) {
		t.Errorf("beta's refused profile was stored")
	}
	platform := api.EnrollRequest{TenantID: "beta", Pool: "gpu", MACs: []string{"52:54:00:00:00:02"}, BMC: api.BMC{Driver: "redfish", Address: "https://127.0.0.2"},
		Drivers: map[string]api.Binding{"power": {Driver: "redfish", Config: []byte(`{"options": {"caFile": "/etc/better-compute/bmc-ca.pem"}}`)}}}
	if err := testkit.Client(t, reg.AdminConfig).Call(ctx, "metal.enroll", platform, nil); err != nil {
		t.Errorf("the platform enrolling for beta with its BMC CA file: %v", err)
	}
}

// TestTenantsAskNoWaitBeyondASiteCommand: tenant beta names a power wait of 1000 hours
// in its enrollment's driver overrides and in a profile's drivers, to hold a command
// slot of its site, which every tenant there shares, with a BMC that never reaches the
// state asked for: INVALID_INPUT at the option, before any command reaches the site.
func TestTenantsAskNoWaitBeyondASiteCommand(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	configs := acmeAndBeta(t, reg.AdminConfig, "compute:nodes:manage,compute:nodes:read,compute:profiles:manage,compute:profiles:read")
	beta, ctx := testkit.Client(t, configs["beta"]), context.Background()
	const path = "drivers.power.config.options." + proto.BMCOptionPowerTimeout
	options := []byte(`{"options": {"powerTimeout": "1000h"}}`)
	req := api.EnrollRequest{Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}, BMC: api.BMC{Driver: "redfish", Address: "https://127.0.0.3"},
		Drivers: map[string]api.Binding{"power": {Driver: "redfish", Config: options}}}
	if err := beta.Call(ctx, "metal.enroll", req, nil); proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != path {
		t.Errorf("beta enrolling with powerTimeout 1000h: %v, want INVALID_INPUT at %s", err, path)
	}
	doc := strings.Replace(flatcarHost("host"), `"steps"`, `"drivers": {"power": {"driver": "redfish", "config": `+string(options)+`}}, "steps"`, 1)
	if err := beta.Call(ctx, "profiles.create", api.CreateProfileRequest{Document: api.Document(doc)}, nil); proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != path {
		t.Errorf("beta's profile with powerTimeout 1000h: %v, want INVALID_INPUT at %s", err, path)
	}
	// A wait the site can finish is the tenant's to choose.
	req.Drivers["power"] = api.Binding{Driver: "redfish", Config: []byte(`{"options": {"powerTimeout": "30m"}}`)}
	if err := beta.Call(ctx, "metal.enroll", req, nil); err != nil {
		t.Errorf("beta enrolling with powerTimeout 30m: %v", err)
	}
}

// acmeBetaAndReader starts a registry with site rack-a and tenants acme and beta, each
// with a pool gpu there, and the CLI configs of three credentials: acme and beta, which
// manage and read their nodes, and acme-reader, which only reads acme's.
func acmeBetaAndReader(t *testing.T) (*testkit.Registry, map[string]string) {
	reg := testkit.StartRegistry(t, "")
	configs := acmeAndBeta(t, reg.AdminConfig, "compute:nodes:manage,compute:nodes:read")
	configs["acme-reader"] = filepath.Join(t.TempDir(), "acme-reader.conf")
	testkit.JSON(t, reg.AdminConfig, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:nodes:read", "--out", configs["acme-reader"])
	return reg, configs
}

// TestLifecycleRequestsStayInTheTenant: tenant beta, allowed to manage its own nodes,
// tries every lifecycle request on tenant acme's node, and a credential of acme that
// may only read nodes tries them on acme's own: NOT_FOUND (naming nothing of acme) and
// FORBIDDEN, and acme's node does not change.
func TestLifecycleRequestsStayInTheTenant(t *testing.T) {
	reg, configs := acmeBetaAndReader(t)
	var node store.Node
	testkit.JSON(t, configs["acme"], &node, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")
	answeringSite(t, reg, "rack-a")
	before := waitState(t, configs["acme"], node.ID, store.NodeReady)
	for _, args := range [][]string{{"inspect"}, {"commission"}, {"release"}, {"retire"}, {"rescue"}, {"unrescue"}, {"retry"}, {"cancel"},
		{"remediate", "--profile", "remediate-reboot"}, {"confirm-mac", "--mac", "52:54:00:00:00:01"}, {"revoke-identity"}} {
		verb := args[0]
		res := testkit.CLI(t, configs["beta"], append([]string{"nodes", verb, node.ID, "--format", "json"}, args[1:]...)...)
		var e testkit.ErrorObject
		json.Unmarshal([]byte(res.Stdout), &e)
		if res.Code != 1 || e.Code != "NOT_FOUND" || e.Details.Path != "nodeId" || strings.Contains(res.Stdout+res.Stderr, "ready") {
			t.Errorf("beta: nodes %s of acme's node: exit %d %s%s, want NOT_FOUND telling nothing of it", verb, res.Code, res.Stdout, res.Stderr)
		}
		if e := testkit.Fails(t, configs["acme-reader"], append([]string{"nodes", verb, node.ID}, args[1:]...)...); e.Code != "FORBIDDEN" {
			t.Errorf("a read-only credential: nodes %s: %+v, want FORBIDDEN", verb, e)
		}
	}
	// Acme's own node is ready, not active: nothing to remediate.
	if e := testkit.Fails(t, configs["acme"], "nodes", "remediate", node.ID, "--profile", "remediate-reboot"); e.Code != "INVALID_STATE" || e.Details.Reason != store.NodeReady {
		t.Errorf("remediating a ready node: %+v, want INVALID_STATE reason ready", e)
	}
	if e := testkit.Fails(t, configs["beta"], "nodes", "deploy", node.ID, "--profile", "metal-retire"); e.Code != "NOT_FOUND" {
		t.Errorf("beta deploying metal-retire on acme's node: %+v", e)
	}
	var after store.Node
	testkit.JSON(t, configs["acme"], &after, "nodes", "get", node.ID)
	if after.State != store.NodeReady || after.Rev != before.Rev || after.Workflow != before.Workflow {
		t.Errorf("acme's node changed: %s rev %d workflow %s, was rev %d workflow %s", after.State, after.Rev, after.Workflow, before.Rev, before.Workflow)
	}
	// A shipped lifecycle profile is no deploy: acme retires through nodes retire.
	if e := testkit.Fails(t, configs["acme"], "nodes", "deploy", node.ID, "--profile", "metal-retire"); e.Code != "INVALID_INPUT" || !strings.Contains(e.Message, "nodes retire") {
		t.Errorf("deploying the shipped metal-retire: %+v, want INVALID_INPUT naming nodes retire", e)
	}
}

// TestNotFoundSaysWhoseForRootOnly: the root tenant's admin naming another tenant's node,
// workflow, profile, pool (to enroll a machine in it too) or image is told which tenant has it and the flag to add; tenant beta naming
// acme's gets exactly the answer of an id that does not exist, command by command.
func TestNotFoundSaysWhoseForRootOnly(t *testing.T) {
	admin := testkit.StartRegistry(t, "").AdminConfig
	configs := acmeAndBeta(t, admin, "compute:nodes:manage,compute:nodes:read,compute:profiles:manage,compute:profiles:read,"+
		"compute:pools:manage,compute:images:publish,compute:images:read")
	testkit.JSON(t, admin, nil, "pools", "create", "train", "--site", "rack-a", "--tenant", "acme")
	var img struct{ ID string }
	testkit.JSON(t, configs["acme"], &img, "images", "register", "--ref", "acme-os@1", "--source", "https://images.example.com/acme-os.raw",
		"--disk-format", "raw", "--sha256", strings.Repeat("ab", 32), "--size", "1")
	var node store.Node
	testkit.JSON(t, configs["acme"], &node, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")
	testkit.JSON(t, configs["acme"], nil, "profiles", "create", writeDoc(t, joinsAsNode))
	if node.Workflow == "" {
		t.Fatalf("enrolled %+v without a workflow", node)
	}
	// Each command names one of acme's objects by id, ID; none is the same for an id
	// that no tenant has.
	commands := map[string]struct {
		args []string
		id   string
		none string
	}{
		"nodes get":             {[]string{"nodes", "get", "ID"}, node.ID, "nd_0123456789abcdef"},
		"nodes inventory":       {[]string{"nodes", "inventory", "ID"}, node.ID, "nd_0123456789abcdef"},
		"nodes release":         {[]string{"nodes", "release", "ID"}, node.ID, "nd_0123456789abcdef"},
		"nodes deploy":          {[]string{"nodes", "deploy", "ID", "--profile", "metal-inspect"}, node.ID, "nd_0123456789abcdef"},
		"nodes revoke-identity": {[]string{"nodes", "revoke-identity", "ID"}, node.ID, "nd_0123456789abcdef"},
		"workflows get":         {[]string{"workflows", "get", "ID"}, node.Workflow, "wf_0123456789abcdef"},
		"profiles render":       {[]string{"profiles", "render", "ID"}, "joins-as-node", "joins-as-nobody"},
		"profiles get":          {[]string{"profiles", "get", "ID"}, "joins-as-node", "joins-as-nobody"},
		"pools get":             {[]string{"pools", "get", "ID"}, "train", "walk"},
		"pools update":          {[]string{"pools", "update", "ID", "--prewarm", "acme-os@1"}, "train", "walk"},
		"nodes enroll":          {[]string{"nodes", "enroll", "--pool", "ID", "--mac", "52:54:00:00:00:09", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2"}, "train", "walk"},
		"images get":            {[]string{"images", "get", "ID"}, img.ID, "img_0123456789abcdef"},
		"images promote":        {[]string{"images", "promote", "ID"}, img.ID, "img_0123456789abcdef"},
	}
	with := func(args []string, id string) []string {
		out := slices.Clone(args)
		out[slices.Index(out, "ID")] = id
		return out
	}
	for name, cmd := range commands {
		t.Run(name, func(t *testing.T) {
			for _, tenant := range []string{"", "beta"} { // root's own tenant, and root acting for beta
				args := with(cmd.args, cmd.id)
				if tenant != "" {
					args = append(args, "--tenant", tenant)
				}
				if e := testkit.Fails(t, admin, args...); e.Code != "NOT_FOUND" || !strings.HasSuffix(e.Message, "; tenant acme has it: add --tenant acme") {
					t.Errorf("root %v: %+v, want NOT_FOUND saying to add --tenant acme", args, e)
				}
			}
			if e := testkit.Fails(t, admin, with(cmd.args, cmd.none)...); e.Code != "NOT_FOUND" || strings.Contains(e.Message, "tenant") && strings.Contains(e.Message, "has it") {
				t.Errorf("root, an id nobody has: %+v, want a plain NOT_FOUND", e)
			}
			theirs := testkit.CLI(t, configs["beta"], append(with(cmd.args, cmd.id), "--format", "json")...)
			nobodys := testkit.CLI(t, configs["beta"], append(with(cmd.args, cmd.none), "--format", "json")...)
			if theirs.Code != 1 || strings.Contains(theirs.Stdout+theirs.Stderr, "acme") ||
				strings.ReplaceAll(theirs.Stdout, cmd.id, "X") != strings.ReplaceAll(nobodys.Stdout, cmd.none, "X") ||
				strings.ReplaceAll(theirs.Stderr, cmd.id, "X") != strings.ReplaceAll(nobodys.Stderr, cmd.none, "X") {
				t.Errorf("beta naming acme's %s: exit %d\n%s%s\nnaming none: exit %d\n%s%s", cmd.id, theirs.Code, theirs.Stdout, theirs.Stderr, nobodys.Code, nobodys.Stdout, nobodys.Stderr)
			}
		})
	}
	// The flag the hint names works.
	testkit.JSON(t, admin, nil, "nodes", "get", node.ID, "--tenant", "acme")
	testkit.JSON(t, admin, nil, "profiles", "render", "joins-as-node", "--tenant", "acme")
}

// acmeAndBeta makes, on the registry of the admin config, site rack-a (BMC network
// 127.0.0.2/31: acme's BMCs at 127.0.0.2, beta's at 127.0.0.3) and tenants acme and beta, each with a pool gpu there and a credential
// holding actions; it returns the credentials' configs by tenant.
func acmeAndBeta(t *testing.T, admin, actions string) map[string]string {
	t.Helper()
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "127.0.0.2/31")
	configs := map[string]string{}
	for _, tn := range []string{"acme", "beta"} {
		testkit.JSON(t, admin, nil, "tenants", "create", tn)
		testkit.JSON(t, admin, nil, "pools", "create", "gpu", "--site", "rack-a", "--tenant", tn)
		configs[tn] = filepath.Join(t.TempDir(), tn+".conf")
		testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", tn, "--actions", actions, "--out", configs[tn])
	}
	return configs
}

// TestRevokeIdentityThroughTheCLI: acme revokes the certificates of its node's agents,
// through the real binaries: the text says what happened and the way back; a reason
// that is no line of text is INVALID_INPUT at reason and changes nothing. The node
// stays ready, its events hold the revocation, the token minted before it no longer
// joins, and `bcd join` with a token minted after joins again, with a certificate of
// the new identity epoch.
func TestRevokeIdentityThroughTheCLI(t *testing.T) {
	reg, configs := acmeBetaAndReader(t)
	acme := configs["acme"]
	var node store.Node
	testkit.JSON(t, acme, &node, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")
	answeringSite(t, reg, "rack-a")
	before := waitState(t, acme, node.ID, store.NodeReady)
	if res := testkit.BCD(t, joinArgs(t, reg, node.ID, mintToken(t, reg.AdminConfig, node.ID))...); res.Code != 0 {
		t.Fatalf("bcd join before the revocation: exit %d\n%s", res.Code, res.Stderr)
	}
	unused := mintToken(t, reg.AdminConfig, node.ID)

	if e := testkit.Fails(t, acme, "nodes", "revoke-identity", node.ID, "--reason", "two\nlines"); e.Code != "INVALID_INPUT" || e.Details.Path != "reason" {
		t.Errorf("a reason on two lines: %+v, want INVALID_INPUT at reason", e)
	}
	var same store.Node
	if testkit.JSON(t, acme, &same, "nodes", "get", node.ID); same.Rev != before.Rev {
		t.Errorf("a refused revocation changed the node: rev %d, was %d", same.Rev, before.Rev)
	}

	res := testkit.CLI(t, acme, "nodes", "revoke-identity", node.ID, "--reason", "OS compromised")
	for _, want := range []string{"revoked: every certificate of node " + node.ID + "'s agents", "identity epoch now 1", "reason: OS compromised",
		"unused join tokens deleted: 1", "tokens create --kind provisioned --node-id " + node.ID} {
		if res.Code != 0 || !strings.Contains(res.Stdout, want) {
			t.Errorf("nodes revoke-identity: exit %d, want %q in\n%s%s", res.Code, want, res.Stdout, res.Stderr)
		}
	}
	var after store.Node
	if testkit.JSON(t, acme, &after, "nodes", "get", node.ID); after.State != store.NodeReady || after.Rev != before.Rev+1 {
		t.Errorf("after the revocation the node is %s at rev %d, want ready at %d", after.State, after.Rev, before.Rev+1)
	}
	var shown api.Node
	if testkit.JSON(t, acme, &shown, "nodes", "get", node.ID); shown.AgentsRevoked == nil || shown.AgentsRevoked.Epoch != 1 ||
		shown.AgentsRevoked.Reason != "OS compromised" || shown.AgentsRevoked.By == "" || shown.IdentityEpoch != 1 {
		t.Errorf("nodes get shows the revocation as %+v at epoch %d, want epoch 1, its reason and who asked", shown.AgentsRevoked, shown.IdentityEpoch)
	}
	if text := testkit.CLI(t, acme, "nodes", "get", node.ID).Stdout; !strings.Contains(text, "the machine's agents' certificates revoked ") ||
		!strings.Contains(text, "(identity epoch 1): OS compromised") {
		t.Errorf("nodes get does not say the agents' certificates were revoked, and why:\n%s", text)
	}
	var events struct{ Events []api.Event }
	testkit.JSON(t, acme, &events, "nodes", "events", node.ID)
	if i := slices.IndexFunc(events.Events, func(e api.Event) bool { return e.Kind == store.EventAgentsRevoked }); i < 0 ||
		!strings.Contains(events.Events[i].Detail, "OS compromised") || events.Events[i].To != "epoch 1" {
		t.Errorf("the node's events hold no revocation with its reason: %+v", events.Events)
	}

	if res := testkit.BCD(t, joinArgs(t, reg, node.ID, unused)...); res.Code == 0 || !strings.Contains(res.Stderr, "UNAUTHENTICATED") {
		t.Errorf("bcd join with the token minted before the revocation: exit %d\n%s", res.Code, res.Stderr)
	}
	args := joinArgs(t, reg, node.ID, mintToken(t, reg.AdminConfig, node.ID))
	if res := testkit.BCD(t, args...); res.Code != 0 {
		t.Fatalf("bcd join after the revocation: exit %d\n%s", res.Code, res.Stderr)
	}
	creds, err := bcdconf.LoadAgent(args[slices.Index(args, "--config-dir")+1])
	if err != nil {
		t.Fatal(err)
	}
	if epoch := creds.Certificate.Leaf.Subject.SerialNumber; epoch != "1" {
		t.Errorf("the certificate joined after the revocation names epoch %q, want 1", epoch)
	}
}

// TestRevokeIdentityFailsTheWorkflowItCutsOff: acme revokes its node's agents while the
// node's inspect waits for its ramdisk (the site agent never answers the ramdisk boot's
// management.setBootDevice), through the real binaries: the text names the workflow the
// revocation failed and what runs it again (for an inspect, `nodes retry`), and the node is failed at once, FORBIDDEN
// agents-revoked, the error naming the credential and the reason, and `nodes get` names
// it beside the revocation. `nodes retry` runs the
// inspect again, and a revocation during it answers, with --format json, its id as
// failedWorkflowId. Before, the answer named no workflow and the inspect waited out its
// step's timeout.
func TestRevokeIdentityFailsTheWorkflowItCutsOff(t *testing.T) {
	reg, configs := acmeBetaAndReader(t)
	acme := configs["acme"]
	var node store.Node
	testkit.JSON(t, acme, &node, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")
	on := func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }
	hang := func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	siteAgent(t, reg, "rack-a", nil, map[string]session.Handler{"power.getPower": on, "inspect.oob": on,
		proto.CommandSetBootDevice: hang, proto.CommandBootCleanUp: on})
	waitState(t, acme, node.ID, store.NodeReady)

	testkit.JSON(t, acme, nil, "nodes", "inspect", node.ID)
	waitStep(t, acme, node.ID, store.StepRunning)
	var inspecting store.Node
	testkit.JSON(t, acme, &inspecting, "nodes", "get", node.ID)
	res := testkit.CLI(t, acme, "nodes", "revoke-identity", node.ID, "--reason", "OS compromised")
	for _, want := range []string{"failed workflow: " + inspecting.Workflow, proto.ReasonAgentsRevoked,
		"once the machine is trusted, run the inspect workflow again (`nodes retry " + node.ID + "`): it boots the ramdisk with a new token"} {
		if res.Code != 0 || !strings.Contains(res.Stdout, want) {
			t.Errorf("nodes revoke-identity during the inspect: exit %d, want %q in\n%s%s", res.Code, want, res.Stdout, res.Stderr)
		}
	}
	failed := waitState(t, acme, node.ID, store.NodeFailed)
	if f := failed.Failure; f == nil || f.RunID != inspecting.Workflow || f.Error.Code != proto.Forbidden || f.Error.Details.Reason != proto.ReasonAgentsRevoked ||
		!strings.Contains(f.Error.Message, "revoked by credential ") || !strings.Contains(f.Error.Message, `"OS compromised"`) {
		t.Errorf("the node failed with %+v, want the inspect %s failed FORBIDDEN agents-revoked, naming the credential and the reason", f, inspecting.Workflow)
	}
	if text := testkit.CLI(t, acme, "nodes", "get", node.ID).Stdout; !strings.Contains(text, "OS compromised; failed workflow "+inspecting.Workflow+
		"; once the machine is trusted, run the inspect workflow again (`nodes retry "+node.ID+"`)") {
		t.Errorf("nodes get does not name the workflow the revocation failed, and what runs it again:\n%s", text)
	}

	testkit.JSON(t, acme, nil, "nodes", "retry", node.ID)
	waitStep(t, acme, node.ID, store.StepRunning)
	testkit.JSON(t, acme, &inspecting, "nodes", "get", node.ID)
	var out api.CertificatesRevoked
	if testkit.JSON(t, acme, &out, "nodes", "revoke-identity", node.ID); out.FailedWorkflowID == "" || out.FailedWorkflowID != inspecting.Workflow {
		t.Errorf("nodes revoke-identity --format json during the retried inspect %s: %+v, want it as failedWorkflowId", inspecting.Workflow, out)
	}
}

// TestOneBMCOneTenant is the attack of tenant beta on tenant acme's machine through its
// BMC, through the real binaries: beta names the address of acme's BMC (inside the
// site's BMC networks), enrolling a node or moving its own node's BMC there, in any form
// the address takes: CONFLICT at bmc.address, naming neither acme nor its node, and
// nothing changes. A binding the platform makes for beta at that address is the
// platform's, and allowed; once acme's node is retired, beta may bind the address.
func TestOneBMCOneTenant(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	configs := acmeAndBeta(t, admin, "compute:nodes:manage,compute:nodes:read")
	acme, beta := configs["acme"], configs["beta"]
	testkit.JSON(t, admin, nil, "pools", "create", "oob", "--site", "rack-a", "--tenant", "acme", "--policy", writeDoc(t, `{"agent": "none"}`))
	enroll := func(pool, mac, address string) []string {
		return []string{"nodes", "enroll", "--pool", pool, "--mac", mac, "--bmc-driver", "redfish", "--bmc-address", address}
	}
	var acmes store.Node
	testkit.JSON(t, acme, &acmes, enroll("oob", "52:54:00:00:00:01", "https://127.0.0.2")...)
	answeringSite(t, reg, "rack-a")
	waitState(t, acme, acmes.ID, store.NodeReady)

	// path is where the request names the address: bmc.address in an enrollment,
	// address in an update of the BMC.
	refused := func(what, path string, args ...string) {
		t.Helper()
		res := testkit.CLI(t, beta, append(args, "--format", "json")...)
		var e testkit.ErrorObject
		json.Unmarshal([]byte(res.Stdout), &e)
		out := res.Stdout + res.Stderr
		if res.Code != 1 || e.Code != "CONFLICT" || e.Details.Path != path || !strings.Contains(e.Message, "by another tenant") ||
			strings.Contains(out, acmes.ID) || strings.Contains(out, "nd_") || strings.Contains(out, "acme") {
			t.Errorf("%s: exit %d\n%s\nwant CONFLICT at %s, by another tenant, naming neither acme nor its node %s", what, res.Code, out, path, acmes.ID)
		}
	}
	for i, address := range []string{"https://127.0.0.2", "127.0.0.2:443", "https://127.0.0.2:8443", "https://[::ffff:127.0.0.2]/redfish/v1"} {
		refused("beta enrolling with acme's BMC "+address, "bmc.address", enroll("gpu", "52:54:00:00:01:0"+string(rune('1'+i)), address)...)
	}
	var list api.NodeList
	if testkit.JSON(t, beta, &list, "nodes", "list"); len(list.Nodes) != 0 {
		t.Fatalf("the refused enrollments left beta nodes %+v", list.Nodes)
	}

	var betas store.Node
	testkit.JSON(t, beta, &betas, enroll("gpu", "52:54:00:00:00:02", "https://127.0.0.3")...)
	before := waitState(t, beta, betas.ID, store.NodeReady)
	refused("beta moving its node's BMC to acme's", "address", "nodes", "update-bmc", betas.ID, "--bmc-address", "https://127.0.0.2:443")
	var after store.Node
	if testkit.JSON(t, beta, &after, "nodes", "get", betas.ID); after.Rev != before.Rev || after.BMC != before.BMC {
		t.Errorf("the refused move changed beta's node: %+v at rev %d, was %+v at %d", after.BMC, after.Rev, before.BMC, before.Rev)
	}

	// The platform binds, for beta, a node at acme's BMC's address: a service it runs.
	var platforms store.Node
	testkit.JSON(t, admin, &platforms, append(enroll("gpu", "52:54:00:00:00:03", "https://127.0.0.2"), "--tenant", "beta")...)
	if !platforms.PlatformBMC {
		t.Errorf("root's binding for beta is not the platform's: %+v", platforms)
	}

	// Acme retires its node: it drives its BMC no more, and beta may bind it.
	testkit.JSON(t, acme, nil, "nodes", "retire", acmes.ID)
	waitState(t, acme, acmes.ID, store.NodeRetired)
	var moved store.Node
	if testkit.JSON(t, beta, &moved, "nodes", "update-bmc", betas.ID, "--bmc-address", "https://127.0.0.2"); moved.BMC.Address != "https://127.0.0.2" {
		t.Errorf("beta binding the BMC of acme's retired node: %+v", moved.BMC)
	}
}

// TestPlatformBMCTrustStands: the platform binds, for tenant beta, a machine whose BMC
// it logs in to with its own credential, trusting the BMC by its key (options.tlsPin).
// beta, able to answer at that address, would have the platform's login sent over a TLS
// session it controls. Its profile's power binding naming a pin of its own is refused
// (FORBIDDEN at the option, before any command reaches the site); one naming other
// options keeps the platform's pin. A root rebinding of the BMC of a node beta enrolled
// with a pin of its own overrides drops that pin before the platform's credential goes
// there.
func TestPlatformBMCTrustStands(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	configs := acmeAndBeta(t, admin, "compute:nodes:manage,compute:nodes:read,compute:profiles:manage,compute:profiles:read")
	beta, ctx := testkit.Client(t, configs["beta"]), context.Background()
	pin := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "sha256/" + base64.StdEncoding.EncodeToString(sum[:])
	}
	platformPin, betaPin := pin("the platform's BMC"), pin("beta's server")
	testkit.JSON(t, admin, nil, "secrets", "put", "--ref", "secret://bmc", "--file", writeDoc(t, `{"username": "admin", "password": "platform"}`))

	// The site agent records the power bindings its power.setPower commands carry.
	creds, err := bcdconf.LoadAgent(testkit.JoinSite(t, reg, "rack-a"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got []string
	)
	on := func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }
	setPower := func(_ context.Context, p json.RawMessage) (json.RawMessage, error) {
		var cmd proto.SiteCommand
		json.Unmarshal(p, &cmd)
		mu.Lock()
		got = append(got, string(cmd.Drivers["power"].Config))
		mu.Unlock()
		return json.RawMessage(`{"action":"on"}`), nil
	}
	sctx, cancel := context.WithCancel(context.Background())
	agent, err := session.New(session.Config{Addr: creds.Config.AgentEndpoint, Certificate: creds.Certificate, ServerCAs: creds.ServingCAs,
		Handlers: map[string]session.Handler{"power.getPower": on, "inspect.oob": on, "power.setPower": setPower}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { agent.Run(sctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	var node api.Node
	platform := api.EnrollRequest{TenantID: "beta", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"},
		BMC:     api.BMC{Driver: "redfish", Address: "https://127.0.0.2", CredentialRef: "secret://platform/bmc"},
		Drivers: map[string]api.Binding{"power": {Driver: "redfish", Config: fmt.Appendf(nil, `{"options": {"tlsPin": %q}}`, platformPin)}}}
	if err := testkit.Client(t, admin).Call(ctx, "metal.enroll", platform, &node); err != nil {
		t.Fatal(err)
	}
	waitState(t, configs["beta"], node.ID, store.NodeReady)

	deploy := func(id, config string) error {
		doc := fmt.Sprintf(`{"id": %q, "version": 1, "target": "metal", "drivers": {"power": {"driver": "redfish", "config": %s}},
  "steps": [{"use": "power.setPower", "on": "site", "with": {"action": "on"}}]}`, id, config)
		if err := beta.Call(ctx, "profiles.create", api.CreateProfileRequest{Document: api.Document(doc)}, nil); err != nil {
			t.Fatal(err)
		}
		return beta.Call(ctx, "metal.deploy", api.DeployRequest{NodeID: node.ID, ProfileID: id}, nil)
	}
	const path = "drivers.power.config.options.tlsPin"
	err = deploy("beta-pin", fmt.Sprintf(`{"options": {"tlsPin": %q}}`, betaPin))
	if proto.CodeOf(err) != proto.Forbidden || proto.AsError(err).Details.Path != path || proto.AsError(err).Details.Reason != proto.ReasonPlatformBMC {
		if err == nil {
			waitState(t, configs["beta"], node.ID, store.NodeActive)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("beta deploying a profile with its own pin on the platform's BMC: %v, want FORBIDDEN at %s; the site got the power bindings %q", err, path, got)
	}
	if err := deploy("beta-wait", `{"options": {"powerTimeout": "2m"}}`); err != nil {
		t.Fatal(err)
	}
	waitState(t, configs["beta"], node.ID, store.NodeActive)
	mu.Lock()
	for _, c := range got {
		if strings.Contains(c, betaPin) || !strings.Contains(c, platformPin) {
			t.Errorf("the site's power.setPower carried the power binding %s: want the platform's pin, never beta's", c)
		}
	}
	if len(got) == 0 {
		t.Errorf("the site got no power.setPower")
	}
	mu.Unlock()

	// beta enrolls a machine trusting a key of its own; the platform then binds its
	// credential there.
	var betas api.Node
	req := api.EnrollRequest{Pool: "gpu", MACs: []string{"52:54:00:00:00:02"}, BMC: api.BMC{Driver: "redfish", Address: "https://127.0.0.3"},
		Drivers: map[string]api.Binding{"power": {Driver: "redfish", Config: fmt.Appendf(nil, `{"options": {"tlsPin": %q}}`, betaPin)}}}
	if err := beta.Call(ctx, "metal.enroll", req, &betas); err != nil {
		t.Fatal(err)
	}
	waitState(t, configs["beta"], betas.ID, store.NodeReady)
	var rebound api.Node
	ref := "secret://platform/bmc"
	if err := testkit.Client(t, admin).Call(ctx, "metal.updateBmc", api.UpdateBMCRequest{TenantID: "beta", NodeID: betas.ID, CredentialRef: &ref}, &rebound); err != nil {
		t.Fatal(err)
	}
	if c := string(rebound.Drivers["power"].Config); !rebound.PlatformBMC || strings.Contains(c, betaPin) {
		t.Errorf("the platform's credential is bound with beta's own pin: platformBmc %v, power config %s", rebound.PlatformBMC, c)
	}
}
