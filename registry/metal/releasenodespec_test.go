package metal

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
)

// TestAReleasedInstallationsNodeSpecGoesWithIt: acme's k8s-worker deploy leaves the
// node's NodeSpec joining its cluster with the token secret://k8s-bootstrap names, which
// the installed OS's agent is handed. The node is released, and deployed again with a
// profile of no host unit. The next installation's agent, joined at the new epoch while
// that deploy runs (or after it failed, when nothing replaces the NodeSpec), is pushed
// the node's NodeSpec and handed the secrets it names: neither the released
// installation's k8s-join nor its token reach it.
func TestAReleasedInstallationsNodeSpecGoesWithIt(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	box, err := secret.New(secret.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	const ref = "secret://k8s-bootstrap"
	if err := h.store.Update(func(tx *store.Tx) error {
		_, _, err := box.PutTenant(tx, "acme", ref, []byte("the cluster's join token"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	handed := func() (proto.NodeSpec, []byte, error) {
		t.Helper()
		var spec proto.NodeSpec
		var value []byte
		var refused error
		if err := h.store.View(func(tx *store.Tx) (err error) {
			if spec, err = tx.NodeSpec(node); err != nil {
				return err
			}
			value, refused = box.ForAgent(tx, node, proto.RoleNode, ref)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return spec, value, refused
	}

	run, err := h.deployRecord(node, ownedBy("acme", k8sWorker))
	if err != nil {
		t.Fatal(err)
	}
	if _, n := h.end(run.ID); n.State != store.NodeActive {
		t.Fatalf("the deploy left node %s: %+v", n.State, n.Failure)
	}
	if _, value, err := handed(); err != nil || len(value) == 0 {
		t.Fatalf("the deployed installation's agent is not handed its join token: %v", err)
	}

	run, _, err = h.act(node, Release, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, n := h.end(run.ID); n.State != store.NodeReady {
		t.Fatalf("the release left node %s: %+v", n.State, n.Failure)
	}
	h.machine.hang(proto.CommandDeployImage)
	if _, err := h.deploy(node, "testdata/deploy-only.json"); err != nil {
		t.Fatal(err)
	}
	spec, value, refused := handed()
	if refs := hostunit.SecretRefs(spec.Host); len(spec.Host) > 0 || len(refs) > 0 {
		t.Errorf("the next installation is pushed the released one's host section (%d units, naming %q)", len(spec.Host), refs)
	}
	if value != nil || proto.CodeOf(refused) != proto.Forbidden {
		t.Errorf("the next installation's agent asking for %s: %q, %v; want FORBIDDEN", ref, value, refused)
	}
}
