package store

import (
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// TestCheckAgentAfterRevocations: a certificate of an epoch before the current one is
// FORBIDDEN, with the reason revoked when an operator's revocation moved the epoch last
// (saying why and how to join again), and earlier-installation when a reinstall did; a
// site agent's certificate is checked against its site's epoch, which only a
// revocation moves, and one of a site that does not exist passes at epoch 0.
func TestCheckAgentAfterRevocations(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withPool(t, open)
		var node string
		mustUpdate(t, s, func(tx *Tx) error {
			n, err := tx.CreateNode(Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}})
			node = n.ID
			return err
		})
		check := func(what, id string, role proto.Role, epoch int64, reason string, says ...string) {
			t.Helper()
			var err error
			s.View(func(tx *Tx) error {
				err = tx.CheckAgent(proto.AgentCredential{Node: id, Role: role, Epoch: epoch})
				return nil
			})
			switch {
			case reason == "" && err != nil:
				t.Errorf("%s: %v, want it taken", what, err)
			case reason != "" && (proto.CodeOf(err) != proto.Forbidden || proto.AsError(err).Details.Reason != reason):
				t.Errorf("%s: %v, want FORBIDDEN %s", what, err, reason)
			}
			for _, s := range says {
				if err == nil || !strings.Contains(err.Error(), s) {
					t.Errorf("%s: %v, want it to say %q", what, err, s)
				}
			}
		}
		check("a site agent of epoch 0", "rack-a", proto.RoleSite, 0, "")
		check("an agent of a site that does not exist", "rack-z", proto.RoleSite, 0, "")

		mustUpdate(t, s, func(tx *Tx) error {
			_, _, err := tx.RevokeSiteAgent("rack-a", Revocation{Reason: "rack server stolen", By: "cred1"})
			return err
		})
		check("the site agent's certificate issued before", "rack-a", proto.RoleSite, 0, proto.ReasonRevoked,
			"rack server stolen", "tokens create --kind site --site rack-a")
		check("the site agent's certificate issued after", "rack-a", proto.RoleSite, 1, "")
		check("the node's installed OS, not the site's", node, proto.RoleNode, 0, "")
		mustUpdate(t, s, func(tx *Tx) error {
			_, _, err := tx.RevokeSiteAgent("rack-a", Revocation{Reason: strings.Repeat("x", proto.MaxReason+1)})
			if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "reason" {
				t.Errorf("a reason too long: %v, want INVALID_INPUT at reason", err)
			}
			if _, _, err := tx.RevokeSiteAgent("rack-z", Revocation{}); proto.CodeOf(err) != proto.NotFound {
				t.Errorf("a site that does not exist: %v, want NOT_FOUND", err)
			}
			return nil
		})
		check("the site agent's certificate after a refused revocation", "rack-a", proto.RoleSite, 1, "")

		// A node's agents: revoked by an operator, then reinstalled.
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.UpdateNode(node, func(n *Node) error {
				n.NewIdentityEpoch(tx.Now())
				n.AgentsRevoked = &Revocation{Epoch: n.IdentityEpoch, At: tx.Now(), Reason: "OS compromised"}
				return nil
			})
			return err
		})
		check("the installed OS's certificate issued before the revocation", node, proto.RoleNode, 0, proto.ReasonRevoked,
			"OS compromised", "tokens create --kind provisioned --node-id "+node)
		check("the ramdisk's certificate issued before the revocation", node, proto.RoleRamdisk, 0, proto.ReasonRevoked, "ramdisk")
		check("a certificate issued after the revocation", node, proto.RoleNode, 1, "")
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.UpdateNode(node, func(n *Node) error { n.NewIdentityEpoch(tx.Now().Add(time.Second)); return nil })
			return err
		})
		check("a certificate of the revoked epoch after a reinstall", node, proto.RoleNode, 0, proto.ReasonEarlierInstallation)
		check("a certificate issued after the revocation, after a reinstall", node, proto.RoleNode, 1, proto.ReasonEarlierInstallation)
		check("a certificate of the new installation", node, proto.RoleNode, 2, "")
	})
}
