package metal

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// k8sWorker is a deploy whose machines join the Kubernetes API server of the profile's
// author with the token its secret://k8s-bootstrap holds.
const k8sWorker = `{"id": "k8s-worker", "version": 1, "target": "metal", "image": {"ref": "ubuntu-24.04-server@2026.09"},
  "hostConfig": {"k8s-join": {"server": "https://k8s.beta.example:6443", "caCertSha256": "` + digest + `", "tokenRef": "secret://k8s-bootstrap"}},
  "steps": [{"use": "deploy.deploy"}]}`

// bmcWorker is a deploy whose driver config names a BMC credential.
const bmcWorker = `{"id": "bmc-worker", "version": 1, "target": "metal", "image": {"ref": "ubuntu-24.04-server@2026.09"},
  "drivers": {"power": {"driver": "redfish", "config": {"credentialRef": "secret://bmc/admin"}}},
  "steps": [{"use": "deploy.deploy"}]}`

// poolJoin is acme's pool's own k8s-join, which replaces a profile's.
var poolJoin = json.RawMessage(`{"server":"https://k8s.acme.example:6443","caCertSha256":"` + digest + `","tokenRef":"secret://k8s/acme-join"}`)

// withKubernetes is the harness's pool policy with k8s (nil for none) as its kubernetes.
func withKubernetes(k8s json.RawMessage) store.PoolPolicy {
	return store.PoolPolicy{HardwareProfile: "gpu-redfish", Hugepages: json.RawMessage(`{"pages1g":64}`),
		GPUSharing: json.RawMessage(`{"mode":"mps","replicas":4}`), Kubernetes: k8s}
}

// ownedBy stores doc as owner's public profile version (making the tenant when it is
// new) and returns its record.
func ownedBy(owner, doc string) func(*store.Tx) (store.ProfileRecord, error) {
	return func(tx *store.Tx) (store.ProfileRecord, error) {
		if _, err := tx.CreateTenant(owner); err != nil && proto.CodeOf(err) != proto.Conflict {
			return store.ProfileRecord{}, err
		}
		p, err := profile.Define([]byte(doc))
		if err != nil {
			return store.ProfileRecord{}, err
		}
		return tx.CreateProfile(store.ProfileRecord{Tenant: owner, ID: p.ID(), Version: p.Version(), Visibility: store.Public, Document: p.Document()})
	}
}

// refusedForeignRef fails t unless err refuses another tenant's secret reference at path.
func refusedForeignRef(t *testing.T, err error, path string) {
	t.Helper()
	if err == nil {
		t.Errorf("not refused; want INVALID_STATE, reason %s, at %s", proto.ReasonForeignSecretRef, path)
		return
	}
	e := proto.AsError(err)
	if e.Code != proto.InvalidState || e.Details.Reason != proto.ReasonForeignSecretRef || e.Details.Path != path ||
		!strings.Contains(e.Message, "profiles create") {
		t.Errorf("got %v (details %+v); want INVALID_STATE, reason %s, at %s, saying to copy the profile", err, e.Details, proto.ReasonForeignSecretRef, path)
	}
}

// TestOnlyTheTenantsOwnProfilesNameItsSecrets: acme deploys profiles that name secret
// references. beta's public profile naming one (a k8s-join's tokenRef, a driver's
// credentialRef) is refused before anything runs, at the reference; the same reference
// in acme's own profile or the platform's deploys, and so does beta's k8s-join when
// acme's pool sets its own, which replaces it: the NodeSpec names only what acme or the
// platform chose.
func TestOnlyTheTenantsOwnProfilesNameItsSecrets(t *testing.T) {
	cases := map[string]struct {
		owner, doc string
		pool       json.RawMessage
		refused    string   // the path of the refused reference, "" when it deploys
		refs       []string // the references of the node's host section when it deploys
	}{
		"beta's k8s-join":                      {owner: "beta", doc: k8sWorker, refused: "hostConfig.k8s-join.tokenRef"},
		"beta's driver credential":             {owner: "beta", doc: bmcWorker, refused: "drivers.power.config.credentialRef"},
		"acme's own k8s-join":                  {owner: "acme", doc: k8sWorker, refs: []string{"secret://k8s-bootstrap"}},
		"the platform's k8s-join":              {owner: store.RootTenant, doc: k8sWorker, refs: []string{"secret://k8s-bootstrap"}},
		"beta's k8s-join, the pool's replaces": {owner: "beta", doc: k8sWorker, pool: poolJoin, refs: []string{"secret://k8s/acme-join"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			node := h.enroll(nil)
			h.setPolicy(withKubernetes(tc.pool))
			before := h.node(node)
			run, err := h.deployRecord(node, ownedBy(tc.owner, tc.doc))
			if tc.refused != "" {
				refusedForeignRef(t, err, tc.refused)
				if after := h.node(node); run.ID != "" || after.Rev != before.Rev || after.State != store.NodeReady {
					t.Errorf("the refused deploy started %q and left node %s rev %d (was rev %d)", run.ID, after.State, after.Rev, before.Rev)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, n := h.end(run.ID); n.State != store.NodeActive {
				t.Fatalf("the deploy left node %s: %+v", n.State, n.Failure)
			}
			var spec proto.NodeSpec
			h.store.View(func(tx *store.Tx) (err error) { spec, err = tx.NodeSpec(node); return err })
			if got := hostunit.SecretRefs(spec.Host); strings.Join(got, " ") != strings.Join(tc.refs, " ") {
				t.Errorf("the NodeSpec names %q, want %q", got, tc.refs)
			}
		})
	}
}

// TestNoRetryNorEndOfADeployNamesAnotherTenantsSecretRef: acme's pool sets its own
// k8s-join, so acme may deploy beta's k8s-worker, whose k8s-join it replaces. Once the
// pool sets none, beta's tokenRef would reach acme's machine: a retry of the failed
// deploy is refused at it and starts nothing, and a deploy that was running when the
// pool changed fails the node rather than give it a NodeSpec naming it, and its run
// with it, with the same failure. Before, the run was recorded succeeded beside its
// failed node (workflows list, the metrics, a watcher of the run).
func TestNoRetryNorEndOfADeployNamesAnotherTenantsSecretRef(t *testing.T) {
	t.Run("retry", func(t *testing.T) {
		h := newHarness(t)
		node := h.enroll(nil)
		h.setPolicy(withKubernetes(poolJoin))
		h.images.verifyErr = proto.Errorf(proto.InvalidState, "image is unsigned").WithReason("unsigned")
		run, err := h.deployRecord(node, ownedBy("beta", k8sWorker))
		if err != nil {
			t.Fatal(err)
		}
		if _, n := h.end(run.ID); n.State != store.NodeFailed {
			t.Fatalf("the deploy left node %s", n.State)
		}
		h.images.verifyErr = nil
		h.setPolicy(withKubernetes(nil))
		before := h.node(node)
		run, _, err = h.act(node, Retry, Options{})
		refusedForeignRef(t, err, "hostConfig.k8s-join.tokenRef")
		if after := h.node(node); run.ID != "" || after.Rev != before.Rev {
			t.Errorf("the refused retry started %q and changed node %s to %s rev %d (was rev %d)", run.ID, node, after.State, after.Rev, before.Rev)
		}
	})
	t.Run("end", func(t *testing.T) {
		h := newHarness(t)
		node := h.enroll(nil)
		h.setPolicy(withKubernetes(poolJoin))
		h.machine.answers[proto.CommandDeployImage] = func(in json.RawMessage) (json.RawMessage, error) {
			h.setPolicy(withKubernetes(nil)) // while the image is written
			var img proto.DeployImage
			json.Unmarshal(in, &img)
			return json.Marshal(proto.DeployImageResult{SHA256: img.SHA256, BytesWritten: img.SizeBytes})
		}
		run, err := h.deployRecord(node, ownedBy("beta", k8sWorker))
		if err != nil {
			t.Fatal(err)
		}
		ended, n := h.end(run.ID)
		var spec proto.NodeSpec
		h.store.View(func(tx *store.Tx) (err error) { spec, err = tx.NodeSpec(node); return err })
		if refs := hostunit.SecretRefs(spec.Host); len(refs) > 0 || len(n.Host) > 0 {
			t.Errorf("node %s's NodeSpec names %q (host section %d units)", n.State, refs, len(n.Host))
		}
		if n.State != store.NodeFailed || n.Failure == nil || n.Failure.RunID != run.ID {
			t.Fatalf("the deploy left node %s with %+v, want it failed by %s", n.State, n.Failure, run.ID)
		}
		refusedForeignRef(t, n.Failure.Error, "hostConfig.k8s-join.tokenRef")
		if ended.State != store.RunFailed || !reflect.DeepEqual(ended.Failure, n.Failure) {
			t.Errorf("the run that failed node %s with %v: %s, failure %+v; want failed with the node's failure", node, n.Failure.Error, ended.State, ended.Failure)
		}
	})
}
