package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// withPool makes tenant acme, site rack-a and acme's pool gpu there.
func withPool(t *testing.T, open opener) *Store {
	t.Helper()
	s := openTest(t, open)
	makePool(t, s)
	return s
}

// addNode enrolls a machine of MAC 52:54:00:00:00:01 in acme's pool gpu (makePool).
func addNode(t *testing.T, s *Store) (n Node) {
	t.Helper()
	mustUpdate(t, s, func(tx *Tx) (err error) {
		n, err = tx.CreateNode(Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}})
		return err
	})
	return n
}

// makePool makes tenant acme, site rack-a and acme's pool gpu there in s.
func makePool(t *testing.T, s *Store) {
	t.Helper()
	mustUpdate(t, s, func(tx *Tx) error {
		if _, err := tx.CreateTenant("acme"); err != nil {
			return err
		}
		if _, err := tx.CreateSite("rack-a"); err != nil {
			return err
		}
		_, err := tx.CreatePool(Pool{Tenant: "acme", Name: "gpu", Site: "rack-a", Policy: PoolPolicy{HardwareProfile: "gpu-redfish"}})
		return err
	})
}

func TestNodeEnrollmentAndLifecycle(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withPool(t, open)
		var n Node
		mustUpdate(t, s, func(tx *Tx) (err error) {
			n, err = tx.CreateNode(Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01", "52:54:00:00:00:02"}, ProductUUID: "4c4c4544-0000-1000-8000-000000000001"})
			return err
		})
		if n.State != NodeEnrolling || n.Site != "rack-a" || n.Rev != 1 || len(n.ID) != 19 {
			t.Fatalf("enrolled %+v", n)
		}
		refused := map[string]struct {
			node Node
			code proto.Code
			path string
		}{
			"a MAC enrolled already":    {Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:02"}}, proto.Conflict, "macs"},
			"a UUID enrolled already":   {Node{Tenant: "acme", Pool: "gpu", ProductUUID: "4c4c4544-0000-1000-8000-000000000001"}, proto.Conflict, "productUuid"},
			"the UUID's other spelling": {Node{Tenant: "acme", Pool: "gpu", ProductUUID: "44454c4c-0000-0010-8000-000000000001"}, proto.Conflict, "productUuid"},
			"no MAC nor UUID":           {Node{Tenant: "acme", Pool: "gpu"}, proto.InvalidInput, "macs"},
			"an unknown pool":           {Node{Tenant: "acme", Pool: "cpu", MACs: []string{"52:54:00:00:00:09"}}, proto.NotFound, "pool"},
		}
		for name, tc := range refused {
			t.Run(name, func(t *testing.T) {
				err := s.Update(func(tx *Tx) error { _, err := tx.CreateNode(tc.node); return err })
				if proto.CodeOf(err) != tc.code || proto.AsError(err).Details.Path != tc.path {
					t.Fatalf("got %v, want %s at %s", err, tc.code, tc.path)
				}
			})
		}
		t.Run("a machine another tenant enrolled is CONFLICT without its node", func(t *testing.T) {
			mustUpdate(t, s, func(tx *Tx) error {
				if _, err := tx.CreateTenant("beta"); err != nil {
					return err
				}
				_, err := tx.CreatePool(Pool{Tenant: "beta", Name: "gpu", Site: "rack-a"})
				return err
			})
			for by, node := range map[string]Node{
				"macs":                              {Tenant: "beta", Pool: "gpu", MACs: []string{"52:54:00:00:00:03", "52:54:00:00:00:01"}},
				"productUuid":                       {Tenant: "beta", Pool: "gpu", ProductUUID: "4c4c4544-0000-1000-8000-000000000001"},
				"productUuid in its other spelling": {Tenant: "beta", Pool: "gpu", ProductUUID: "44454c4c-0000-0010-8000-000000000001"},
			} {
				path, _, _ := strings.Cut(by, " ")
				err := s.Update(func(tx *Tx) error { _, err := tx.CreateNode(node); return err })
				if e := proto.AsError(err); e.Code != proto.Conflict || e.Details.Path != path || strings.Contains(e.Message, n.ID) || !strings.Contains(e.Message, "another tenant") {
					t.Errorf("beta enrolling acme's machine by %s: %v; want CONFLICT at %s without acme's node id", by, err, path)
				}
			}
			// Its own tenant is told which node has the MAC.
			err := s.Update(func(tx *Tx) error {
				_, err := tx.CreateNode(Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}})
				return err
			})
			if !strings.Contains(fmt.Sprint(err), n.ID) {
				t.Errorf("acme enrolling its own machine again: %v, want its node named", err)
			}
		})

		err := s.Update(func(tx *Tx) error {
			_, err := tx.UpdateNode(n.ID, func(n *Node) error { n.MACs = nil; return nil })
			return err
		})
		if proto.CodeOf(err) != proto.Internal {
			t.Errorf("changing the MACs: %v", err)
		}

		mustUpdate(t, s, func(tx *Tx) error {
			if _, err := tx.CreatePool(Pool{Tenant: "acme", Name: "cpu", Site: "rack-a"}); err != nil {
				return err
			}
			_, err := tx.CreateNode(Node{Tenant: "acme", Pool: "cpu", MACs: []string{"52:54:00:00:00:03"}})
			return err
		})
		s.View(func(tx *Tx) error {
			ids := func(pool string, p Page) []string {
				nodes, _, err := tx.Nodes("acme", pool, "", p)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, n := range nodes {
					out = append(out, n.ID)
				}
				return out
			}
			if diff := cmp.Diff([]string{n.ID}, ids("gpu", Page{})); diff != "" {
				t.Errorf("pool gpu (-want +got):\n%s", diff)
			}
			if got := ids("", Page{}); len(got) != 2 {
				t.Errorf("every pool: %v", got)
			}
			first, next, _ := tx.Nodes("acme", "", "", Page{Limit: 1})
			second, _, _ := tx.Nodes("acme", "", "", Page{Limit: 1, Cursor: next})
			if len(first) != 1 || len(second) != 1 || first[0].ID == second[0].ID || next == "" {
				t.Errorf("pages: %v then %v", first, second)
			}
			if got := ids("none", Page{}); len(got) != 0 {
				t.Errorf("a pool without nodes: %v", got)
			}
			return nil
		})
	})
}

func TestRevokedIdentity(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withPool(t, open)
		var node string
		var usedKept, otherKept string
		mustUpdate(t, s, func(tx *Tx) error {
			n, err := tx.CreateNode(Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}})
			if err != nil {
				return err
			}
			node = n.ID
			if err := tx.CheckIdentity(node); err != nil {
				t.Errorf("before revocation: %v", err)
			}
			if err := tx.CheckIdentity("rack-a"); err != nil {
				t.Errorf("an id no node has (a site agent's): %v", err)
			}
			for range 2 { // unused: deleted at revocation
				if _, _, err := tx.CreateJoinToken(TokenFor{Kind: TokenRamdisk, NodeID: node, Site: "rack-a"}, tx.Now().Add(time.Hour)); err != nil {
					return err
				}
			}
			used, secret, err := tx.CreateJoinToken(TokenFor{Kind: TokenProvisioned, NodeID: node, Site: "rack-a"}, tx.Now().Add(time.Hour))
			if err != nil {
				return err
			}
			if _, err := tx.ConsumeJoinToken(secret, ""); err != nil {
				return err
			}
			usedKept = used.ID
			other, _, err := tx.CreateJoinToken(TokenFor{Kind: TokenProvisioned, NodeID: "nd_other", Site: "rack-a"}, tx.Now().Add(time.Hour))
			otherKept = other.ID
			return err
		})
		mustUpdate(t, s, func(tx *Tx) error {
			if _, err := tx.UpdateNode(node, func(n *Node) error { n.IdentityRevokedAt = tx.Now(); return nil }); err != nil {
				return err
			}
			deleted, err := tx.DeleteUnusedJoinTokens(node)
			if deleted != 2 {
				t.Errorf("deleted %d unused tokens, want 2", deleted)
			}
			return err
		})
		s.View(func(tx *Tx) error {
			e := proto.AsError(tx.CheckIdentity(node))
			if e.Code != proto.Forbidden || e.Details.Reason != "identity-revoked" {
				t.Errorf("after revocation: %v (reason %q), want FORBIDDEN identity-revoked", e, e.Details.Reason)
			}
			all, _, err := tx.JoinTokens(Page{})
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, tok := range all {
				left = append(left, tok.ID)
			}
			if diff := cmp.Diff([]string{otherKept, usedKept}, left, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("tokens left (-want +got): the used one and another node's\n%s", diff)
			}
			return nil
		})
	})
}

// TestEnrolledNodesReadAsReady: a node stored before the lifecycle, in state enrolled,
// reads as ready (it was deployable then and stays so), and lists under that state.
func TestEnrolledNodesReadAsReady(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withPool(t, open)
		var n Node
		mustUpdate(t, s, func(tx *Tx) (err error) {
			if n, err = tx.CreateNode(Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}}); err != nil {
				return err
			}
			n.State = nodeEnrolledV1
			return tx.put(bucketNodes, []byte(n.ID), n)
		})
		s.View(func(tx *Tx) error {
			got, err := tx.Node(n.ID)
			if err != nil || got.State != NodeReady {
				t.Errorf("a node stored as enrolled reads as %q (%v), want ready", got.State, err)
			}
			ready, _, _ := tx.Nodes("acme", "", NodeReady, Page{})
			enrolling, _, _ := tx.Nodes("acme", "", NodeEnrolling, Page{})
			if len(ready) != 1 || len(enrolling) != 0 {
				t.Errorf("listed as ready: %d, as enrolling: %d", len(ready), len(enrolling))
			}
			return nil
		})
	})
}
