package store

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestSetNodeSpecGenerations(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		var mu sync.Mutex
		var notified []int64
		cancel := s.OnNodeSpec(func(node string, gen int64) {
			mu.Lock()
			defer mu.Unlock()
			notified = append(notified, gen)
		})
		unit := func(v string) []proto.HostUnit {
			return []proto.HostUnit{{Unit: "sysctl", Settings: json.RawMessage(`{"vm.swappiness":` + v + `}`)}}
		}
		steps := []struct {
			name    string
			spec    proto.NodeSpec
			wantGen int64
			code    proto.Code
		}{
			{"first", proto.NodeSpec{Node: "n1", Role: proto.RoleNode, Host: unit("1")}, 1, ""},
			{"changed", proto.NodeSpec{Node: "n1", Role: proto.RoleNode, Host: unit("2")}, 2, ""},
			{"same content, caller's generation ignored", proto.NodeSpec{Node: "n1", Role: proto.RoleNode, Generation: 40, Host: unit("2")}, 2, ""},
			{"invalid", proto.NodeSpec{Node: "n1", Role: "boss"}, 0, proto.InvalidConfig},
			{"changed again", proto.NodeSpec{Node: "n1", Role: proto.RoleNode}, 3, ""},
		}
		for _, step := range steps {
			var got proto.NodeSpec
			err := s.Update(func(tx *Tx) (err error) { got, err = tx.SetNodeSpec(step.spec); return err })
			if proto.CodeOf(err) != step.code && !(err == nil && step.code == "") {
				t.Fatalf("%s: got %v, want %q", step.name, err, step.code)
			}
			if err == nil && got.Generation != step.wantGen {
				t.Fatalf("%s: generation %d, want %d", step.name, got.Generation, step.wantGen)
			}
		}
		if diff := cmp.Diff([]int64{1, 2, 3}, notified); diff != "" {
			t.Errorf("notifications (-want +got):\n%s", diff)
		}
		// A rolled back transaction notifies nobody.
		s.Update(func(tx *Tx) error {
			tx.SetNodeSpec(proto.NodeSpec{Node: "n1", Role: proto.RoleSite})
			return proto.Errorf(proto.Internal, "roll back")
		})
		if len(notified) != 3 {
			t.Errorf("a rolled back change notified: %v", notified)
		}
		s.View(func(tx *Tx) error {
			got, err := tx.NodeSpec("n1")
			if err != nil || got.Generation != 3 || got.Role != proto.RoleNode {
				t.Errorf("stored: %+v, %v", got, err)
			}
			if _, err := tx.NodeSpec("n2"); proto.CodeOf(err) != proto.NotFound {
				t.Errorf("missing spec: got %v, want NOT_FOUND", err)
			}
			return nil
		})
		// A cancelled hook hears of nothing more.
		cancel()
		s.Update(func(tx *Tx) error {
			_, err := tx.SetNodeSpec(proto.NodeSpec{Node: "n1", Role: proto.RoleSite})
			return err
		})
		if len(notified) != 3 {
			t.Errorf("a cancelled hook was notified: %v", notified)
		}
	})
}

func TestAgentStatus(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		boom := &proto.Error{Code: proto.DriverError, Message: "sysctl failed"}
		steps := []struct {
			name string
			do   func(tx *Tx) error
			want AgentStatus
		}{
			{"applied 2", func(tx *Tx) error { return tx.RecordObservedGeneration("n1", 2) },
				AgentStatus{Node: "n1", ObservedGeneration: 2}},
			{"failed 3", func(tx *Tx) error { return tx.RecordApplyFailure("n1", 3, boom) },
				AgentStatus{Node: "n1", ObservedGeneration: 2, FailedGeneration: 3, ApplyError: boom}},
			{"reconnect still at 2", func(tx *Tx) error { return tx.RecordObservedGeneration("n1", 2) },
				AgentStatus{Node: "n1", ObservedGeneration: 2, FailedGeneration: 3, ApplyError: boom}},
			{"applied 4 clears the failure", func(tx *Tx) error { return tx.RecordObservedGeneration("n1", 4) },
				AgentStatus{Node: "n1", ObservedGeneration: 4}},
		}
		for _, step := range steps {
			if err := s.Update(step.do); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			var got AgentStatus
			s.View(func(tx *Tx) (err error) { got, err = tx.AgentStatus("n1"); return err })
			if diff := cmp.Diff(step.want, got, cmp.AllowUnexported(proto.Error{}), ignoreTimes); diff != "" {
				t.Errorf("%s (-want +got):\n%s", step.name, diff)
			}
		}
		if err := s.Update(func(tx *Tx) error { return tx.RecordObservedGeneration("a/b", 1) }); proto.CodeOf(err) != proto.InvalidInput {
			t.Errorf("bad node id: got %v", err)
		}
	})
}

func TestPutInventory(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		cases := []struct {
			name    string
			section string
			data    string
			changed bool
			code    proto.Code
		}{
			{"new", "nics", `[ {"mac": "52:54:00:00:00:01"} ]`, true, ""},
			{"same up to spaces", "nics", `[{"mac":"52:54:00:00:00:01"}]`, false, ""},
			{"changed", "nics", `[]`, true, ""},
			{"other section", "images", `{}`, true, ""},
			{"not json", "system", `{`, false, proto.InvalidInput},
			{"unnamed", "", `{}`, false, proto.InvalidInput},
			{"named with a slash", "nics/x", `{}`, false, proto.InvalidInput},
			{"named by 65 bytes", "n" + strings.Repeat("i", 64), `{}`, false, proto.InvalidInput},
		}
		for _, tc := range cases {
			var changed bool
			err := s.Update(func(tx *Tx) (err error) {
				changed, err = tx.PutInventory("n1", tc.section, json.RawMessage(tc.data))
				return err
			})
			if tc.code != "" && proto.CodeOf(err) != tc.code || tc.code == "" && err != nil {
				t.Fatalf("%s: got %v, want %q", tc.name, err, tc.code)
			}
			if changed != tc.changed {
				t.Errorf("%s: changed %v, want %v", tc.name, changed, tc.changed)
			}
		}
		var got []InventorySection
		s.View(func(tx *Tx) (err error) { got, err = tx.Inventory("n1"); return err })
		want := []InventorySection{
			{Node: "n1", Section: "images", Data: json.RawMessage(`{}`)},
			{Node: "n1", Section: "nics", Data: json.RawMessage(`[]`)},
		}
		if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
			t.Errorf("inventory (-want +got):\n%s", diff)
		}
	})
}

func TestAgentKeyIsKept(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		var a, b, c [32]byte
		s.Update(func(tx *Tx) (err error) { a, err = tx.AgentKey("one"); return err })
		s.Update(func(tx *Tx) (err error) { b, err = tx.AgentKey("one"); return err })
		s.Update(func(tx *Tx) (err error) { c, err = tx.AgentKey("two"); return err })
		if a != b || a == [32]byte{} || a == c {
			t.Fatalf("keys %x, %x, %x", a, b, c)
		}
	})
}

// TestNodeSpecTakesItsHostFromItsNode: the NodeSpec of a node's installed agent whose
// host section is the node's desired one keeps the section once, in the node's record:
// its own record takes a few hundred bytes (before, it held the section again, and the
// end of a deploy of a section of 1 MB wrote 2 MB in one transaction, more than etcd
// takes by default), and it reads with the section. A change of the node's section (a
// release clears it) leaves the NodeSpec as it was, at its generation; another section
// is a new generation. A NodeSpec stored with its section, as before, reads as it did.
func TestNodeSpecTakesItsHostFromItsNode(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withPool(t, open)
		n := addNode(t, s)
		section := func(fill string) []HostUnit {
			return []HostUnit{
				{Unit: "sysctl", Settings: json.RawMessage(`{"kernel.pad":"` + strings.Repeat(fill, 100_000) + `"}`)},
				{Unit: "nvidia-driver", Settings: json.RawMessage(`{"branch":"580"}`)},
			}
		}
		// deployed gives the node a host section and its NodeSpec, as a deploy's end does.
		deployed := func(host []HostUnit) {
			t.Helper()
			mustUpdate(t, s, func(tx *Tx) error {
				node, err := tx.UpdateNode(n.ID, func(n *Node) error { n.Host = host; return nil })
				if err != nil {
					return err
				}
				_, err = tx.SetNodeSpec(proto.NodeSpec{Node: n.ID, Role: proto.RoleNode, Labels: map[string]string{"gpu": "h100"}, Host: asUnits(node.Host)})
				return err
			})
		}
		// stored is the NodeSpec as read, and the size of its own record.
		stored := func(node string) (proto.NodeSpec, int) {
			t.Helper()
			var spec proto.NodeSpec
			var size int
			err := s.View(func(tx *Tx) (err error) {
				size = len(tx.kv.get(bucketNodeSpecs, []byte(node)))
				spec, err = tx.NodeSpec(node)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return spec, size
		}
		want := func(gen int64, host []HostUnit) proto.NodeSpec {
			return proto.NodeSpec{Node: n.ID, Role: proto.RoleNode, Generation: gen, Labels: map[string]string{"gpu": "h100"}, Host: asUnits(host)}
		}
		check := func(what string, want proto.NodeSpec, small bool) {
			t.Helper()
			got, size := stored(n.ID)
			if diff := cmp.Diff(want, got, cmp.Transformer("json", func(r json.RawMessage) string { return string(r) })); diff != "" {
				t.Errorf("%s: the NodeSpec (-want +got):\n%s", what, diff)
			}
			if small != (size < 1024) {
				t.Errorf("%s: the NodeSpec's record takes %d bytes, want it to hold the host section %t", what, size, !small)
			}
		}

		first := section("<&>")
		deployed(first)
		check("deployed", want(1, first), true)
		deployed(first)
		check("the same NodeSpec again", want(1, first), true)
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.UpdateNode(n.ID, func(n *Node) error { n.Host = nil; return nil })
			return err
		})
		check("released", want(1, first), false)
		second := section("ab")
		deployed(second)
		check("deployed again", want(2, second), true)

		// A NodeSpec whose section is not its node's keeps its own.
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.SetNodeSpec(proto.NodeSpec{Node: n.ID, Role: proto.RoleNode, Labels: map[string]string{"gpu": "h100"}, Host: asUnits(first)})
			return err
		})
		check("another section than the node's", want(3, first), false)

		// A NodeSpec stored with its section, as a registry of an earlier version did.
		earlier := want(7, first)
		earlier.Node = "nd_earlier"
		mustUpdate(t, s, func(tx *Tx) error { return tx.put(bucketNodeSpecs, []byte(earlier.Node), earlier) })
		if got, _ := stored(earlier.Node); !cmp.Equal(earlier, got, cmp.Transformer("json", func(r json.RawMessage) string { return string(r) })) {
			t.Errorf("a NodeSpec of an earlier version reads as %+v", got)
		}
	})
}

// asUnits is a node's host section as its NodeSpec carries it.
func asUnits(host []HostUnit) []proto.HostUnit {
	var units []proto.HostUnit
	for _, u := range host {
		units = append(units, proto.HostUnit{Unit: u.Unit, Settings: u.Settings})
	}
	return units
}

// TestSetNodeSpecPastFrame: a NodeSpec whose push takes more than an agent frame is
// refused where it is set, INVALID_INPUT too-large at the section that grew, and the
// node keeps the spec it had; before, it was stored and failed at every push.
func TestSetNodeSpecPastFrame(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		small := proto.NodeSpec{Node: "n1", Role: proto.RoleNode, Labels: map[string]string{"rack": "r1"}}
		if err := s.Update(func(tx *Tx) error { _, err := tx.SetNodeSpec(small); return err }); err != nil {
			t.Fatal(err)
		}
		big := small
		big.Host = []proto.HostUnit{{Unit: "files", Settings: json.RawMessage(`"` + strings.Repeat("a", proto.MaxFrame) + `"`)}}
		err := s.Update(func(tx *Tx) error { _, err := tx.SetNodeSpec(big); return err })
		if err == nil {
			t.Fatal("a NodeSpec past the frame was stored")
		}
		if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "host" || e.Details.Reason != proto.ReasonTooLarge {
			t.Fatalf("a NodeSpec past the frame: got %v, want INVALID_INPUT too-large at host", err)
		}
		s.View(func(tx *Tx) error {
			got, err := tx.NodeSpec("n1")
			if err != nil || got.Generation != 1 || len(got.Host) != 0 {
				t.Errorf("the NodeSpec kept: generation %d, %d host units, %v; want generation 1 without host units", got.Generation, len(got.Host), err)
			}
			return nil
		})
		// One well under the frame is stored.
		fits := small
		fits.Host = []proto.HostUnit{{Unit: "files", Settings: json.RawMessage(`"` + strings.Repeat("a", proto.MaxFrame/8) + `"`)}}
		if err := s.Update(func(tx *Tx) error { _, err := tx.SetNodeSpec(fits); return err }); err != nil {
			t.Fatalf("a NodeSpec of an eighth of a frame: %v", err)
		}
	})
}
