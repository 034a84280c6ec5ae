package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
)

// refsFleet is a tenant, acme, with a pool of nodes and versions of its profile gpu, on a
// store whose tenants hold at most bound profile versions.
type refsFleet struct {
	t     *testing.T
	s     *Store
	clk   *clock.Fake
	nodes []string
}

func newRefsFleet(t *testing.T, s *Store, clk *clock.Fake, nodes int) *refsFleet {
	t.Helper()
	f := &refsFleet{t: t, s: s, clk: clk}
	makePool(t, s)
	mustUpdate(t, s, func(tx *Tx) error {
		for i := range nodes {
			n, err := tx.CreateNode(Node{Tenant: "acme", Pool: "gpu", MACs: []string{fmt.Sprintf("52:54:00:00:01:%02x", i)}, State: NodeReady})
			if err != nil {
				return err
			}
			f.nodes = append(f.nodes, n.ID)
		}
		return nil
	})
	return f
}

func (f *refsFleet) create(v int) error {
	return f.s.Update(func(tx *Tx) error {
		_, err := tx.CreateProfile(ProfileRecord{Tenant: "acme", ID: "gpu", Version: v, Document: profileDoc("gpu", v)})
		return err
	})
}

// deploy runs version v on node as a deploy does: the version marked used and the run
// created in one transaction, then, when ends, the run ended and the node naming v and
// the run, as metal's deployEnded leaves it. It returns the run's id.
func (f *refsFleet) deploy(node string, v int, ends bool) string {
	f.t.Helper()
	var id string
	mustUpdate(f.t, f.s, func(tx *Tx) error {
		if err := tx.MarkProfileUsed("acme", "gpu", v); err != nil {
			return err
		}
		r, err := tx.CreateRun(Run{Kind: "deploy", Node: node, Tenant: "acme", Profile: ProfileRef{Tenant: "acme", ID: "gpu", Version: v}, Steps: []RunStep{{Phase: "main"}}})
		id = r.ID
		if err != nil || !ends {
			return err
		}
		if _, err := tx.UpdateRun(r.ID, func(r *Run) error { r.State = RunSucceeded; return nil }); err != nil {
			return err
		}
		_, err = tx.UpdateNode(node, func(n *Node) error {
			n.State, n.Profile, n.Workflow = NodeActive, &ProfileRef{Tenant: "acme", ID: "gpu", Version: v}, r.ID
			return nil
		})
		return err
	})
	return id
}

// release leaves node without profile, naming another run (a release's) as its last.
func (f *refsFleet) release(node string) {
	f.t.Helper()
	mustUpdate(f.t, f.s, func(tx *Tx) error {
		_, err := tx.UpdateNode(node, func(n *Node) error {
			n.State, n.Profile, n.Workflow = NodeReady, nil, "wf_release"
			return nil
		})
		return err
	})
}

// prune runs housekeeping's prunes of runs and deleted versions, a retention later.
func (f *refsFleet) prune() (runs, versions int) {
	f.t.Helper()
	f.clk.Advance(RunRetention + time.Hour)
	runs, err := f.s.Prune(func(tx *Tx) (int, error) { return tx.PruneRuns(tx.Now().Add(-RunRetention)) })
	if err != nil {
		f.t.Fatal(err)
	}
	if versions, err = f.s.PruneOnward((*Tx).PruneDeletedProfiles); err != nil {
		f.t.Fatal(err)
	}
	return runs, versions
}

// stored reports whether version v's record is stored.
func (f *refsFleet) stored(v int) bool {
	var ok bool
	f.s.View(func(tx *Tx) (err error) { _, ok, err = tx.Profile("acme", "gpu", v); return err })
	return ok
}

// TestADeletedVersionAWorkflowRanIsPrunedOnceNothingRefersToIt: a deleted version a
// workflow ran keeps its record, for what reads it, and its place under the tenant's
// bound while a run of it is stored, and while a node's record names it after its runs
// were pruned; once the last node naming it is released or deployed with another
// version, housekeeping's prune deletes its record and its used mark and frees its
// place, its number still CONFLICT. Before, such a version was kept and counted for
// ever: a tenant that deployed and deleted versions reached its bound. Check finds the
// store whole at every step.
func TestADeletedVersionAWorkflowRanIsPrunedOnceNothingRefersToIt(t *testing.T) {
	const bound = 2
	eachBackend(t, func(t *testing.T, open opener) {
		clk := clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
		s := openTest(t, open, Options{Now: clk.Now, Bounds: TenantBounds{ProfileVersions: bound}})
		f := newRefsFleet(t, s, clk, 2)
		for v := 1; v <= bound; v++ {
			if err := f.create(v); err != nil {
				t.Fatal(err)
			}
		}
		f.deploy(f.nodes[0], 1, true)
		f.deploy(f.nodes[1], 1, true)
		running := f.deploy(f.nodes[1], 2, false)
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.DeleteProfile("acme", "gpu", 1); return err })
		quota := func(step string) {
			t.Helper()
			if pe, _ := errors.AsType[*proto.Error](f.create(3)); pe == nil || pe.Details.Reason != proto.ReasonQuota {
				t.Fatalf("a version past the bound %s: %v, want INVALID_STATE quota", step, pe)
			}
		}
		quota("while version 1's runs are stored")

		// Version 1's runs are stored: the prune keeps it.
		if _, versions := f.prune(); versions != 0 || !f.stored(1) {
			t.Fatalf("while its runs and nodes refer to it, %d versions pruned, version 1 stored %t; want it kept", versions, f.stored(1))
		}
		mustCheck(t, s, "a prune of runs named by their nodes")

		// Node 1's deploy of version 2 ends: its runs of version 1 are pruned a retention
		// later, node 0 still names version 1.
		mustUpdate(t, s, func(tx *Tx) error {
			if _, err := tx.UpdateRun(running, func(r *Run) error { r.State = RunSucceeded; return nil }); err != nil {
				return err
			}
			_, err := tx.UpdateNode(f.nodes[1], func(n *Node) error {
				n.Profile, n.Workflow = &ProfileRef{Tenant: "acme", ID: "gpu", Version: 2}, running
				return nil
			})
			return err
		})
		// Node 0 runs another workflow, of a document of its own (a power cycle's, say),
		// which it names as its last: its deploy is pruned too.
		mustUpdate(t, s, func(tx *Tx) error {
			r, err := tx.CreateRun(Run{Kind: "reboot", Node: f.nodes[0], Tenant: "acme", Document: profileDoc("power", 1), Steps: []RunStep{{Phase: "main"}}})
			if err != nil {
				return err
			}
			if _, err := tx.UpdateRun(r.ID, func(r *Run) error { r.State = RunSucceeded; return nil }); err != nil {
				return err
			}
			_, err = tx.UpdateNode(f.nodes[0], func(n *Node) error { n.Workflow = r.ID; return nil })
			return err
		})
		if runs, versions := f.prune(); runs == 0 || versions != 0 || !f.stored(1) {
			t.Fatalf("with version 1's runs pruned (%d entries) and node 0 naming it, %d versions pruned, version 1 stored %t; want it kept", runs, versions, f.stored(1))
		}
		s.View(func(tx *Tx) error {
			if rec, _, err := tx.Profile("acme", "gpu", 1); err != nil || !rec.Used || !rec.Deleted {
				t.Errorf("version 1 kept for node 0: used %t, deleted %t, %v", rec.Used, rec.Deleted, err)
			}
			return nil
		})
		quota("while node 0 names version 1")
		mustCheck(t, s, "a prune of runs whose node names their version")

		// Node 0 is released: nothing refers to version 1 any more.
		f.release(f.nodes[0])
		if _, versions := f.prune(); versions != 1 || f.stored(1) {
			t.Fatalf("with nothing referring to version 1, %d versions pruned, version 1 stored %t; want it pruned", versions, f.stored(1))
		}
		if n := tenantCount(t, s, countProfileVersions, "acme"); n != 1 {
			t.Errorf("acme's count after version 1 was pruned: %d, want 1 (version 2)", n)
		}
		s.View(func(tx *Tx) error {
			if tx.getRaw(bucketUsedProfiles, profileKey("acme", "gpu", 1)) != nil {
				t.Errorf("version 1's used mark is kept after its record")
			}
			return nil
		})
		if err := f.create(1); proto.CodeOf(err) != proto.Conflict {
			t.Errorf("version 1 again after its prune: %v, want CONFLICT", err)
		}
		if err := f.create(3); err != nil {
			t.Errorf("a version after version 1 was pruned: %v", err)
		}
		mustCheck(t, s, "the prune of a deleted version")
	})
}

// TestAStoreOfFormat5HasItsProfileReferencesIndexedAsItIsRaised: a store of format 5
// holds no profiles_refs and workflows_by_end values of the node alone, which Check of it
// as it is takes. A raise that stopped after its first transaction leaves it of format
// 5; opened again, it is raised to Format, over more than one transaction, with an entry
// for each run of a stored version and each node naming one, and the values naming
// their runs' versions, and Check finds nothing: a deleted version is then kept while
// its runs are, and pruned with them. Check of format 6 reports a run without its entry.
func TestAStoreOfFormat5HasItsProfileReferencesIndexedAsItIsRaised(t *testing.T) {
	eachPlace(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		f := newRefsFleet(t, s, clk, 2)
		for v := 1; v <= 2; v++ {
			if err := f.create(v); err != nil {
				t.Fatal(err)
			}
		}
		var runs []string
		for len(runs) < MaxPruned+200 {
			mustUpdate(t, s, func(tx *Tx) error {
				if err := tx.MarkProfileUsed("acme", "gpu", 1); err != nil {
					return err
				}
				for range 200 {
					r, err := tx.CreateRun(Run{Kind: "inspect", Node: f.nodes[0], Tenant: "acme", Profile: ProfileRef{Tenant: "acme", ID: "gpu", Version: 1}, Steps: []RunStep{{Phase: "main"}}})
					if err != nil {
						return err
					}
					if _, err := tx.UpdateRun(r.ID, func(r *Run) error { r.State = RunFailed; return nil }); err != nil {
						return err
					}
					runs = append(runs, r.ID)
				}
				return nil
			})
		}
		named := f.deploy(f.nodes[1], 2, true)
		// As a release of format 5 left it: no profiles_refs, workflows_by_end values of
		// the node alone.
		var ends [][2][]byte
		s.View(func(tx *Tx) error {
			c := tx.kv.cursor(bucketRunsByEnd)
			for k, v := c.First(); k != nil; k, v = c.Next() {
				node, _ := parseRunEndValue(v)
				ends = append(ends, [2][]byte{slices.Clone(k), []byte(node)})
			}
			return nil
		})
		for i := 0; i < len(ends); i += 500 {
			mustUpdate(t, s, func(tx *Tx) error {
				for _, e := range ends[i:min(i+500, len(ends))] {
					if err := tx.putRaw(bucketRunsByEnd, e[0], e[1]); err != nil {
						return err
					}
				}
				return nil
			})
		}
		var refs [][]byte
		s.View(func(tx *Tx) error {
			c := tx.kv.cursor(bucketProfileRefs)
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				refs = append(refs, slices.Clone(k))
			}
			return nil
		})
		if len(refs) != len(runs)+2 {
			t.Fatalf("%d entries in profiles_refs before the raise, want %d: the runs and node 1's deploy and node", len(refs), len(runs)+2)
		}
		for i := 0; i < len(refs); i += 500 {
			mustUpdate(t, s, func(tx *Tx) error {
				for _, k := range refs[i:min(i+500, len(refs))] {
					if err := tx.del(bucketProfileRefs, k); err != nil {
						return err
					}
				}
				return nil
			})
		}
		setFormat(t, s, []byte("5"))
		// A raise that stopped after its first transaction.
		mustUpdate(t, s, func(tx *Tx) error { return tx.reindexProfileRefs(refs[:MaxPruned/2]) })
		s.Close()

		ro := mustOpen(t, open, Options{ReadOnly: true})
		if err := ro.Check(); err != nil {
			t.Errorf("Check of a store of format 5, not raised yet: %v", err)
		}
		ro.Close()

		s = mustOpen(t, open, Options{Now: clk.Now})
		f.s = s
		if got := storedFormat(t, s); got != fmt.Sprint(Format) {
			t.Fatalf("format key %q after the open, want %d", got, Format)
		}
		mustCheck(t, s, "the raise")
		s.View(func(tx *Tx) error {
			for _, k := range refs {
				if tx.getRaw(bucketProfileRefs, k) == nil {
					t.Fatalf("profiles_refs/%q is missing after the raise", k)
				}
			}
			return nil
		})

		// Version 1, deleted, is kept while its runs are stored, and pruned with them.
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.DeleteProfile("acme", "gpu", 1); return err })
		s.View(func(tx *Tx) error {
			if n, _, err := tx.PruneDeletedProfiles(nil); err != nil || n != 0 {
				t.Errorf("the prune while version 1's runs are stored: %d pruned (%v), want none", n, err)
			}
			return nil
		})
		// The entries of every run, node 1's deploy among them, which it names and keeps.
		if n, versions := f.prune(); n != len(runs)+1 || versions != 1 || f.stored(1) {
			t.Errorf("the prune after the raise read %d entries, pruned %d versions, version 1 stored %t; want %d and version 1 pruned", n, versions, f.stored(1), len(runs)+1)
		}
		if !f.stored(2) {
			t.Errorf("version 2, which node 1 names and its run %s runs, is not stored", named)
		}
		mustCheck(t, s, "the prune after the raise")

		key := profileRefKey(ProfileRef{Tenant: "acme", ID: "gpu", Version: 2}, refRun, named)
		mustUpdate(t, s, func(tx *Tx) error { return tx.del(bucketProfileRefs, key) })
		if err := s.Check(); err == nil || !strings.Contains(err.Error(), "profiles_refs") {
			t.Errorf("Check of a run without its entry: %v", err)
		}
		mustUpdate(t, s, func(tx *Tx) error { return tx.putRaw(bucketProfileRefs, key, []byte(f.nodes[1])) })
	})
}
