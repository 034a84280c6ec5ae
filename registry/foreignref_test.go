package registry

import (
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
)

// foreignK8sWorker is globex's public profile: its machines join globex's Kubernetes
// API server with the bootstrap token named secret://k8s-bootstrap.
const foreignK8sWorker = `{"id": "k8s-worker", "version": 1, "target": "metal",
  "hostConfig": {"k8s-join": {"server": "https://k8s.globex.example:6443", "caCertSha256": "` +
	"6f1ed002ab5595859014ebf0951522d9e3a8e3d0cf4f9f4e8b19f7b9b6a5f2c1" + `", "tokenRef": "secret://k8s-bootstrap"}},
  "steps": [{"use": "wait.agentJoined", "with": {"role": "node"}, "timeout": "5m"}]}`

// TestAnotherTenantsProfileNamesNoSecretOfTheDeployingTenant: globex publishes a profile
// whose k8s-join names globex's own API server and the token secret://k8s-bootstrap, a
// name acme keeps its own cluster's bootstrap token under. acme deploys
// globex/k8s-worker on its machine, whose installed OS's agent would be handed acme's
// secret (a node's secrets come from its own tenant's store) and send it to globex's
// server. The deploy is refused before anything runs, INVALID_STATE with reason
// foreign-secret-ref at hostConfig.k8s-join.tokenRef, telling acme to copy the profile;
// the same document as acme's own profile deploys, and its agent gets acme's secret,
// which acme named itself.
func TestAnotherTenantsProfileNamesNoSecretOfTheDeployingTenant(t *testing.T) {
	f := startBusyFleet(t)
	ctx := t.Context()
	site := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	defer site.session(ctx, site.start())() // it answers the enrollment's BMC reads
	acme, globex := f.tenants["acme"], f.tenants["globex"]
	const ref, acmesToken = "secret://k8s-bootstrap", "acme-cluster-bootstrap-token"
	_, err := call[api.PutSecret](f.admin, "secrets.put", api.PutSecretRequest{TenantID: "acme", Ref: ref, Value: []byte(acmesToken)})
	f.must(err, "secrets.put")
	f.must(globex.Call(ctx, "profiles.create", api.CreateProfileRequest{Document: api.Document(foreignK8sWorker), Visibility: store.Public}, nil),
		"globex's profiles.create")
	node, ok := f.enrollReady(acme, 0, 1)
	if !ok {
		t.FailNow()
	}

	// deployed deploys profile on acme's node, runs its installed OS's agent until the
	// deploy succeeds, and returns what that agent is handed when it asks for ref.
	deployed := func(started api.DeployStarted) (secret []byte, err error) {
		machine := f.newAgent(node.ID, f.raceJoin(store.TokenProvisioned, node.ID, "node"))
		s := machine.start()
		defer machine.session(ctx, s)()
		f.wait("the deploy of "+started.Profile.ID+" succeeded", func() bool {
			wf, err := call[api.WorkflowView](acme, "workflows.get", api.GetWorkflowRequest{ID: started.WorkflowID})
			return err == nil && wf.State == store.RunSucceeded
		})
		return s.Secret(ctx, ref)
	}

	before, err := call[api.NodeView](acme, "metal.get", api.NodeKey{NodeID: node.ID})
	f.must(err, "metal.get")
	started, err := call[api.DeployStarted](acme, "metal.deploy", api.DeployRequest{NodeID: node.ID, ProfileID: "globex/k8s-worker"})
	if err == nil {
		secret, err := deployed(started)
		t.Fatalf("acme's deploy of globex/k8s-worker went on: acme's machine is handed %q (%v) to send to globex's server", secret, err)
	}
	e, _ := err.(*proto.Error)
	if e == nil || e.Code != proto.InvalidState || e.Details.Reason != proto.ReasonForeignSecretRef || e.Details.Path != "hostConfig.k8s-join.tokenRef" ||
		!strings.Contains(e.Message, "profiles create") {
		t.Fatalf("acme's deploy of globex/k8s-worker: %v (details %+v); want INVALID_STATE, reason %s, at hostConfig.k8s-join.tokenRef, saying to copy it",
			err, e, proto.ReasonForeignSecretRef)
	}
	if n, err := call[api.NodeView](acme, "metal.get", api.NodeKey{NodeID: node.ID}); err != nil || n.State != store.NodeReady || n.Workflow != before.Workflow {
		t.Errorf("after the refused deploy acme's node is %s, workflow %s (%v), want ready with no new workflow", n.State, n.Workflow, err)
	}

	// acme's own copy names acme's secret for acme's machine: it deploys.
	f.must(acme.Call(ctx, "profiles.create", api.CreateProfileRequest{Document: api.Document(foreignK8sWorker)}, nil), "acme's profiles.create")
	started, err = call[api.DeployStarted](acme, "metal.deploy", api.DeployRequest{NodeID: node.ID, ProfileID: "k8s-worker"})
	if !f.must(err, "acme's deploy of its own copy") {
		t.FailNow()
	}
	if secret, err := deployed(started); string(secret) != acmesToken {
		t.Errorf("acme's machine running acme's own profile asked for %s: %q, %v", ref, secret, err)
	}
}
