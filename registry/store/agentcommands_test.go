package store

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var ignoreTimes = cmpopts.IgnoreTypes(time.Time{})

func TestAgentCommandLifecycle(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		s, err := open(t, Options{Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wipe := proto.Command{ID: "c1", Kind: "disk.wipe", Payload: json.RawMessage(`{ "disk": "sda" }`)}
		ramdisk := proto.RoleRamdisk
		enqueue := []struct {
			name string
			node string
			role proto.Role
			cmd  proto.Command
			code proto.Code
		}{
			{"new", "n1", ramdisk, wipe, ""},
			{"same again", "n1", ramdisk, proto.Command{ID: "c1", Kind: "disk.wipe", Payload: json.RawMessage(`{"disk":"sda"}`)}, ""},
			{"same id other payload", "n1", ramdisk, proto.Command{ID: "c1", Kind: "disk.wipe", Payload: json.RawMessage(`{"disk":"sdb"}`)}, proto.Conflict},
			{"same id other role", "n1", proto.RoleNode, wipe, proto.Conflict},
			{"same id other node", "n2", ramdisk, wipe, ""},
			{"bad id", "n1", ramdisk, proto.Command{ID: "", Kind: "x"}, proto.InvalidInput},
			{"no kind", "n1", ramdisk, proto.Command{ID: "c9"}, proto.InvalidInput},
			{"no role", "n1", "", proto.Command{ID: "c9", Kind: "x"}, proto.InvalidInput},
			{"bad payload", "n1", ramdisk, proto.Command{ID: "c9", Kind: "x", Payload: json.RawMessage(`{`)}, proto.InvalidInput},
			{"second", "n1", ramdisk, proto.Command{ID: "c2", Kind: "inventory"}, ""},
		}
		for _, tc := range enqueue {
			now = now.Add(time.Second)
			err := s.Update(func(tx *Tx) error { _, err := tx.EnqueueAgentCommand(tc.node, tc.role, tc.cmd, nil); return err })
			if tc.code != "" && proto.CodeOf(err) != tc.code || tc.code == "" && err != nil {
				t.Fatalf("%s: got %v, want %q", tc.name, err, tc.code)
			}
		}
		pending := func(node string) []string {
			var ids []string
			s.View(func(tx *Tx) error {
				cs, err := tx.PendingAgentCommands(node)
				for _, c := range cs {
					ids = append(ids, c.ID)
				}
				return err
			})
			return ids
		}
		if diff := cmp.Diff([]string{"c1", "c2"}, pending("n1")); diff != "" {
			t.Fatalf("pending (-want +got):\n%s", diff)
		}
		res := proto.Result{ID: "c1", Result: json.RawMessage(`{"wiped":true}`)}
		s.Update(func(tx *Tx) error { _, err := tx.CompleteAgentCommand("n1", res); return err })
		var done AgentCommand
		s.Update(func(tx *Tx) (err error) {
			done, err = tx.CompleteAgentCommand("n1", proto.Result{ID: "c1", Error: &proto.Error{Code: proto.Internal}})
			return err
		})
		want := AgentCommand{Node: "n1", Role: ramdisk, ID: "c1", Kind: "disk.wipe", Payload: json.RawMessage(`{"disk":"sda"}`), Done: true, Result: res.Result}
		if diff := cmp.Diff(want, done, ignoreTimes); diff != "" {
			t.Errorf("the first answer wins (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"c2"}, pending("n1")); diff != "" {
			t.Errorf("pending after c1 (-want +got):\n%s", diff)
		}
		// c1 asked again once answered, as it was or with its input made anew (a step
		// resumed after a restart): the first answer, kept, and nothing pending. Another
		// kind or role is still another command.
		again := []struct {
			name string
			role proto.Role
			cmd  proto.Command
			code proto.Code
		}{
			{"the same", ramdisk, wipe, ""},
			{"other payload", ramdisk, proto.Command{ID: "c1", Kind: "disk.wipe", Payload: json.RawMessage(`{"disk":"sdb"}`)}, ""},
			{"other kind", ramdisk, proto.Command{ID: "c1", Kind: "inventory"}, proto.Conflict},
			{"other role", proto.RoleNode, wipe, proto.Conflict},
		}
		for _, tc := range again {
			var got AgentCommand
			err := s.Update(func(tx *Tx) (err error) { got, err = tx.EnqueueAgentCommand("n1", tc.role, tc.cmd, nil); return err })
			if tc.code != "" {
				if proto.CodeOf(err) != tc.code {
					t.Errorf("answered c1 asked again, %s: got %v, want %s", tc.name, err, tc.code)
				}
				continue
			}
			if err != nil {
				t.Fatalf("answered c1 asked again, %s: %v", tc.name, err)
			}
			if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
				t.Errorf("answered c1 asked again, %s: want it answered as it was (-want +got):\n%s", tc.name, diff)
			}
		}
		if diff := cmp.Diff([]string{"c2"}, pending("n1")); diff != "" {
			t.Errorf("pending after c1 was asked again (-want +got):\n%s", diff)
		}
		// n1's c1 was made 1s after the start, n2's c1 5s after, n1's c2 10s after: a
		// cutoff between the last two expires the first two, answered or not.
		var n int
		s.Update(func(tx *Tx) (err error) {
			n, err = tx.ExpireAgentCommands(time.Date(2026, 1, 2, 3, 4, 11, 0, time.UTC))
			return err
		})
		if n != 2 || len(pending("n2")) != 0 || len(pending("n1")) != 1 {
			t.Errorf("expired %d; pending n1 %v, n2 %v", n, pending("n1"), pending("n2"))
		}
		if err := s.Update(func(tx *Tx) error { _, err := tx.CompleteAgentCommand("n1", res); return err }); proto.CodeOf(err) != proto.NotFound {
			t.Errorf("answer to an expired command: got %v, want NOT_FOUND", err)
		}
	})
}

// TestOnAgentCommand checks that the OnAgentCommand hooks learn of a command enqueued and
// of its answer, once each, after the commit and never for a transaction that failed, and
// that a cancelled hook learns nothing more.
func TestOnAgentCommand(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		var got []string
		cancel := s.OnAgentCommand(func(c AgentCommand) { got = append(got, c.Node+"/"+c.ID+map[bool]string{true: " done"}[c.Done]) })
		cmd := proto.Command{ID: "c1", Kind: "disk.wipe"}
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.EnqueueAgentCommand("n1", proto.RoleRamdisk, cmd, nil); return err })
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.EnqueueAgentCommand("n1", proto.RoleRamdisk, cmd, nil); return err }) // the same again: nothing written
		failed := s.Update(func(tx *Tx) error {
			if _, err := tx.EnqueueAgentCommand("n1", proto.RoleRamdisk, proto.Command{ID: "c2", Kind: "disk.wipe"}, nil); err != nil {
				return err
			}
			return proto.Errorf(proto.Internal, "rolled back")
		})
		if failed == nil {
			t.Fatal("the failing transaction committed")
		}
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.CompleteAgentCommand("n1", proto.Result{ID: "c1"}); return err })
		if diff := cmp.Diff([]string{"n1/c1", "n1/c1 done"}, got); diff != "" {
			t.Fatalf("hook calls (-want +got):\n%s", diff)
		}
		cancel()
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.EnqueueAgentCommand("n1", proto.RoleRamdisk, proto.Command{ID: "c3", Kind: "disk.wipe"}, nil)
			return err
		})
		if len(got) != 2 {
			t.Fatalf("a cancelled hook was called: %v", got)
		}
	})
}

// TestAgentCommandWithoutRole checks a command an older registry stored without a role:
// it is for an agent of a role that runs its kind (of any role for a kind no step names),
// as that registry sent it otherwise, until it is asked for again with its role, which
// is then recorded, and is for that role only from then on. A disk.wipe stored so never
// goes to the installed OS's agent, whose user holds its key.
func TestAgentCommandWithoutRole(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		cmd := proto.Command{ID: "c1", Kind: "disk.wipe"}
		stored := func(id, kind string) AgentCommand {
			c := AgentCommand{Node: "n1", ID: id, Kind: kind, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
			mustUpdate(t, s, func(tx *Tx) error { return tx.put(bucketAgentCommands, commandKey(c.Node, c.ID), c) })
			return c
		}
		old := stored(cmd.ID, cmd.Kind)
		read := func() (c AgentCommand) {
			mustUpdate(t, s, func(tx *Tx) (err error) { c, err = tx.AgentCommand("n1", "c1"); return err })
			return c
		}
		if c := read(); c.For(proto.RoleNode) || !c.For(proto.RoleRamdisk) || c.For(proto.RoleSite) {
			t.Fatalf("a disk.wipe stored without a role: for node %v, ramdisk %v, site %v; want the ramdisk only", c.For(proto.RoleNode), c.For(proto.RoleRamdisk), c.For(proto.RoleSite))
		}
		for kind, want := range map[string][]proto.Role{
			proto.CommandInventoryRefresh: {proto.RoleRamdisk, proto.RoleNode},
			proto.CommandSetPower:         {proto.RoleSite},
			"echo":                        proto.Roles, // no step names it: as the older registry sent it
		} {
			c := stored("k-"+strings.ReplaceAll(kind, ".", "-"), kind)
			for _, r := range proto.Roles {
				if c.For(r) != slices.Contains(want, r) {
					t.Errorf("a %s stored without a role is for a %s agent: %v, want %v", kind, r, c.For(r), slices.Contains(want, r))
				}
			}
		}
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.EnqueueAgentCommand("n1", proto.RoleRamdisk, cmd, nil); return err })
		if c := read(); c.Role != proto.RoleRamdisk || c.For(proto.RoleNode) || !c.CreatedAt.Equal(old.CreatedAt) {
			t.Errorf("asked for again by the ramdisk's step: %+v, want the same command for the ramdisk only", c)
		}
		err := s.Update(func(tx *Tx) error { _, err := tx.EnqueueAgentCommand("n1", proto.RoleNode, cmd, nil); return err })
		if proto.CodeOf(err) != proto.Conflict {
			t.Errorf("the same command for the node agent: %v, want CONFLICT", err)
		}
	})
}

// TestAgentCommandKept checks what a command is stored with beside its payload for its
// caller (AgentCommand.Kept): stored and returned with it, never in the command as it
// goes on the wire; a pending command asked for with another kept value is CONFLICT, as
// with another payload, and nothing is replaced; one that is not JSON is INVALID_INPUT
// at kept, and nothing is stored.
func TestAgentCommandKept(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		cmd := proto.Command{ID: "c1", Kind: proto.CommandTPMActivate, Payload: json.RawMessage(`{"credential":"AQ=="}`)}
		enqueue := func(cmd proto.Command, kept string) (c AgentCommand, err error) {
			err = s.Update(func(tx *Tx) (err error) {
				c, err = tx.EnqueueAgentCommand("n1", proto.RoleRamdisk, cmd, json.RawMessage(kept))
				return err
			})
			return c, err
		}
		if _, err := enqueue(cmd, `"c2VjcmV0"`); err != nil {
			t.Fatal(err)
		}
		if _, err := enqueue(proto.Command{ID: "c2", Kind: proto.CommandTPMActivate}, `{`); proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "kept" {
			t.Errorf("kept that is not JSON: %v, want INVALID_INPUT at kept", err)
		}
		if _, err := enqueue(cmd, `"b3RoZXI="`); proto.CodeOf(err) != proto.Conflict {
			t.Errorf("pending, asked for with another kept value: %v, want CONFLICT", err)
		}
		c, err := enqueue(cmd, `"c2VjcmV0"`)
		if err != nil || string(c.Kept) != `"c2VjcmV0"` {
			t.Fatalf("asked for again as it was: %+v, %v", c, err)
		}
		if wire, _ := json.Marshal(c.Command()); strings.Contains(string(wire), "c2VjcmV0") {
			t.Errorf("the command as it goes on the wire carries what is kept: %s", wire)
		}
		var stored []string
		s.View(func(tx *Tx) error {
			return tx.eachAgentCommand(nil, func(c AgentCommand) error { stored = append(stored, c.ID+" "+string(c.Kept)); return nil })
		})
		if diff := cmp.Diff([]string{`c1 "c2VjcmV0"`}, stored); diff != "" {
			t.Errorf("stored (-want +got):\n%s", diff)
		}
	})
}
