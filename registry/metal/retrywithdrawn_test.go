package metal

import (
	"os"
	"slices"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// TestRetryRunsNoVersionItsOwnerWithdrew: acme deploys beta's public profile on its own
// node (beta/deploy-only@1, as metal.deploy resolves it) and the deploy fails. While the
// version stays public, a retry runs it again. Once beta makes it private, or deletes
// it, acme's retry is NOT_FOUND, as a deploy naming it is, with the same answer for
// both, and starts nothing: a retry is a new workflow of the version, and reaches no
// version its owner withdrew. Acme's own deleted version is as gone to its retry. The
// node no longer offers the retry (before, it offered one it always refused).
func TestRetryRunsNoVersionItsOwnerWithdrew(t *testing.T) {
	doc, err := os.ReadFile("testdata/deploy-only.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Define(doc)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		owner    string
		withdraw func(tx *store.Tx) error
	}{
		"beta makes it private": {"beta", func(tx *store.Tx) error {
			_, err := tx.SetProfileVisibility("beta", p.ID(), p.Version(), 0, store.Private)
			return err
		}},
		"beta deletes it":      {"beta", func(tx *store.Tx) error { _, err := tx.DeleteProfile("beta", p.ID(), p.Version()); return err }},
		"acme deletes its own": {"acme", func(tx *store.Tx) error { _, err := tx.DeleteProfile("acme", p.ID(), p.Version()); return err }},
	}
	var answers []string
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			node := h.enroll(nil)
			h.images.verifyErr = proto.Errorf(proto.InvalidState, "image is unsigned").WithReason("unsigned")
			run, err := h.deployRecord(node, func(tx *store.Tx) (store.ProfileRecord, error) {
				if _, err := tx.CreateTenant("beta"); err != nil {
					return store.ProfileRecord{}, err
				}
				return tx.CreateProfile(store.ProfileRecord{Tenant: tc.owner, ID: p.ID(), Version: p.Version(), Visibility: store.Public, Document: p.Document()})
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, n := h.end(run.ID); n.State != store.NodeFailed {
				t.Fatalf("the deploy left node %s", n.State)
			}
			// While the version stands, a retry runs it again.
			run, _, err = h.act(node, Retry, Options{})
			if err != nil {
				t.Fatalf("retry of a version that stands: %v", err)
			}
			if _, n := h.end(run.ID); n.State != store.NodeFailed || run.Profile.Tenant != tc.owner {
				t.Fatalf("the retry ran %+v and left node %s", run.Profile, n.State)
			}
			if err := h.store.Update(tc.withdraw); err != nil {
				t.Fatal(err)
			}
			before := h.node(node)
			if offers := h.offers(node); slices.Contains(offers, Retry) {
				t.Errorf("the node offers %v, a retry of a withdrawn version among them", offers)
			}
			run, _, err = h.act(node, Retry, Options{})
			if proto.CodeOf(err) != proto.NotFound || run.ID != "" {
				t.Fatalf("retry of a withdrawn version: run %q, %v; want NOT_FOUND and no run", run.ID, err)
			}
			if after := h.node(node); after.Rev != before.Rev || after.State != store.NodeFailed || after.Workflow != before.Workflow {
				t.Errorf("the refused retry changed node %s: %s %s rev %d, was %s %s rev %d", node, after.State, after.Workflow, after.Rev,
					before.State, before.Workflow, before.Rev)
			}
			if tc.owner == "beta" {
				answers = append(answers, proto.AsError(err).Message)
			}
		})
	}
	if len(answers) == 2 && answers[0] != answers[1] {
		t.Errorf("the retry tells private from deleted:\n%s\n%s", answers[0], answers[1])
	}
}
