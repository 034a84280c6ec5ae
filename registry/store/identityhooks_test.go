package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// TestOnNodeIdentity checks the hook the agent endpoint ends stale sessions from: it is
// told of a commit that moved a node's identity epoch or revoked its identity, with the
// node as stored, before the commit returns (so before the caller starts the workflow
// that relays the new installation's commands), and of nothing else: an enrollment, a
// node change that leaves its identity, a rolled back move, anything after cancel. What
// an agent's certificate is checked against, read alone, is the node's identity.
func TestOnNodeIdentity(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withPool(t, open)
		var got []string
		cancel := s.OnNodeIdentity(func(n NodeChange) {
			got = append(got, fmt.Sprintf("%s epoch %d revoked %v", n.ID, n.IdentityEpoch, !n.IdentityRevokedAt.IsZero()))
		})
		n := addNode(t, s)
		update := func(change func(*Node)) {
			t.Helper()
			mustUpdate(t, s, func(tx *Tx) error {
				_, err := tx.UpdateNode(n.ID, func(n *Node) error { change(n); return nil })
				return err
			})
		}
		expect := func(what string, want ...string) {
			t.Helper()
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s: told (-want +got):\n%s", what, diff)
			}
		}
		expect("an enrollment")
		update(func(n *Node) { n.State = NodeReady })
		expect("a change of state")
		update(func(n *Node) { n.IdentityEpoch++ })
		expect("an epoch moved", n.ID+" epoch 1 revoked false")
		err := s.Update(func(tx *Tx) error {
			if _, err := tx.UpdateNode(n.ID, func(n *Node) error { n.IdentityEpoch++; return nil }); err != nil {
				return err
			}
			return proto.Errorf(proto.Internal, "roll back")
		})
		if err == nil {
			t.Fatal("a rolled back transaction committed")
		}
		expect("a rolled back move", n.ID+" epoch 1 revoked false")
		update(func(n *Node) {
			n.IdentityRevokedAt = time.Now()
			n.AgentsRevoked = &Revocation{Epoch: 1, At: time.Now(), Reason: "key leaked"}
		})
		expect("a revocation", n.ID+" epoch 1 revoked false", n.ID+" epoch 1 revoked true")
		// What certificates are checked against, read alone (Tx.CheckAgent), is the
		// node's identity as stored.
		var stored Node
		var read nodeIdentity
		mustUpdate(t, s, func(tx *Tx) (err error) {
			if stored, err = tx.Node(n.ID); err != nil {
				return err
			}
			read, _, err = tx.identity(n.ID)
			return err
		})
		if want := stored.identity(); read.ID != want.ID || read.IdentityEpoch != 1 || !read.IdentityRevokedAt.Equal(want.IdentityRevokedAt) ||
			read.AgentsRevoked == nil || read.AgentsRevoked.Reason != "key leaked" {
			t.Errorf("the identity read %+v, want the node's %+v", read, want)
		}
		cancel()
		update(func(n *Node) { n.IdentityEpoch++ })
		expect("after cancel", n.ID+" epoch 1 revoked false", n.ID+" epoch 1 revoked true")
	})
}

// TestOnSessionOpened checks the hook that tells a registry that another holds a newer
// session of an agent: told of a machine agent's join that a registry's session holds
// and of a site agent's session opened, with the holder; not of a join the JoinService
// admitted (no session holds it yet), nor of a session's end.
func TestOnSessionOpened(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		var got []string
		defer s.OnSessionOpened(func(node, role string, h Holder) { got = append(got, node+"/"+role+" at "+h.Replica) })()
		at := Holder{Replica: "rg_a", Started: time.Now()}
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.RecordAgentJoin("nd_1", "node", Holder{}, time.Time{}, "")
			return err
		})
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.RecordAgentJoin("nd_1", "node", at, time.Time{}, ""); return err })
		mustUpdate(t, s, func(tx *Tx) error { return tx.RecordAgentLeft("nd_1", "node", at, time.Now()) })
		opened := time.Now()
		mustUpdate(t, s, func(tx *Tx) error { return tx.OpenAgentSession("site-rack-a", "site", at, opened) })
		mustUpdate(t, s, func(tx *Tx) error { return tx.CloseAgentSession("site-rack-a", at, opened) })
		if diff := cmp.Diff([]string{"nd_1/node at rg_a", "site-rack-a/site at rg_a"}, got); diff != "" {
			t.Errorf("told (-want +got):\n%s", diff)
		}
	})
}

// TestEtcdIdentityToldBeforeLaterCommits: a replica learns of another replica's epoch
// move, revocation and session openings through its hooks, and of the epoch move before
// the command the other replica enqueued after it: a command of a node's next
// installation never finds the session of its earlier one still open.
func TestEtcdIdentityToldBeforeLaterCommits(t *testing.T) {
	stores := replicas(t, 2)
	local, remote := stores[0], stores[1]
	makePool(t, remote)
	n := addNode(t, remote)
	told := make(chan string, 100)
	defer local.OnNodeIdentity(func(n NodeChange) {
		if n.IdentityEpoch > 0 || !n.IdentityRevokedAt.IsZero() {
			told <- fmt.Sprintf("epoch %d revoked %v", n.IdentityEpoch, !n.IdentityRevokedAt.IsZero())
		}
	})()
	defer local.OnAgentCommand(func(c AgentCommand) { told <- "command " + c.ID })()
	defer local.OnSessionOpened(func(node, role string, h Holder) { told <- "session " + role + " at " + h.Replica })()
	relayed := 0
	moveAndRelay := func(change func(*Node)) {
		mustUpdate(t, remote, func(tx *Tx) error {
			_, err := tx.UpdateNode(n.ID, func(n *Node) error { change(n); return nil })
			return err
		})
		mustUpdate(t, remote, func(tx *Tx) error {
			_, err := tx.EnqueueAgentCommand(n.ID, proto.RoleRamdisk, proto.Command{ID: fmt.Sprintf("c%d", relayed), Kind: "disk.wipe"}, nil)
			return err
		})
		relayed++
	}
	moveAndRelay(func(n *Node) { n.IdentityEpoch++ })
	mustUpdate(t, remote, func(tx *Tx) error {
		_, err := tx.RecordAgentJoin(n.ID, "ramdisk", Holder{Replica: "rg_remote", Started: time.Now()}, time.Time{}, "")
		return err
	})
	moveAndRelay(func(n *Node) { n.IdentityRevokedAt = time.Now() })
	want := []string{"epoch 1 revoked false", "command c0", "session ramdisk at rg_remote", "epoch 1 revoked true", "command c1"}
	var got []string
	for range want {
		select {
		case s := <-told:
			got = append(got, s)
		case <-time.After(30 * time.Second):
			t.Fatalf("told %v, and nothing more within 30 s; want %v", got, want)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("told, in order (-want +got):\n%s", diff)
	}
}

// TestOnSiteIdentity checks the hook the agent endpoint ends a revoked site agent's
// session from: told of a site whose agent's certificates were revoked, with the site as
// stored, before the commit returns, and of no other change of the site; on etcd, the
// other replica is told of it too. What the site agent's certificate is checked against,
// read alone, refuses the earlier epoch with the revocation's reason.
func TestOnSiteIdentity(t *testing.T) {
	stores := replicas(t, 2)
	local, remote := stores[0], stores[1]
	var got []string
	defer local.OnSiteIdentity(func(s Site) { got = append(got, fmt.Sprintf("%s epoch %d", s.ID, s.IdentityEpoch)) })()
	told := make(chan string, 10)
	defer remote.OnSiteIdentity(func(s Site) {
		if s.IdentityEpoch > 0 {
			told <- fmt.Sprintf("%s epoch %d", s.ID, s.IdentityEpoch)
		}
	})()
	mustUpdate(t, local, func(tx *Tx) error { _, err := tx.CreateSite("rack-a"); return err })
	mustUpdate(t, local, func(tx *Tx) error { _, err := tx.SetSiteImageSources("rack-a", []string{"images.example"}); return err })
	if len(got) != 0 {
		t.Fatalf("told %v of a site made and changed, want nothing", got)
	}
	mustUpdate(t, local, func(tx *Tx) error {
		_, _, err := tx.RevokeSiteAgent("rack-a", Revocation{Reason: "server stolen"})
		return err
	})
	if diff := cmp.Diff([]string{"rack-a epoch 1"}, got); diff != "" {
		t.Errorf("told locally (-want +got):\n%s", diff)
	}
	select {
	case s := <-told:
		if s != "rack-a epoch 1" {
			t.Errorf("the other replica was told %q, want rack-a epoch 1", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the other replica was not told of the revocation within 30 s")
	}
	err := remote.View(func(tx *Tx) error {
		return tx.CheckAgent(proto.AgentCredential{Node: "rack-a", Role: proto.RoleSite, Epoch: 0})
	})
	if proto.CodeOf(err) != proto.Forbidden || proto.AsError(err).Details.Reason != proto.ReasonRevoked || !strings.Contains(err.Error(), "server stolen") {
		t.Errorf("the site agent's certificate of epoch 0 after the revocation: %v, want FORBIDDEN revoked with the reason", err)
	}
	if err := remote.View(func(tx *Tx) error {
		return tx.CheckAgent(proto.AgentCredential{Node: "rack-a", Role: proto.RoleSite, Epoch: 1})
	}); err != nil {
		t.Errorf("the site agent's certificate of epoch 1: %v, want it current", err)
	}
}
