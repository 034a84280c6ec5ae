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
