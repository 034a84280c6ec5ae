package store

import (
	"bytes"
	"crypto/sha256"
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
			mustUpdate(t, s, func(tx *Tx) error { return storeAsEarlier(tx, c) })
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

// TestRecordedAgentCommands checks what an answered command keeps once its run recorded
// its answer (RecordAgentCommands), on each backend and after the store is opened again:
// only the digests of its payload and answer, where it was recorded, and that it is
// done, for the attempt's id and the ids under it, of that agent only; a pending command,
// an id that merely starts alike (a1 against a10) and another agent's are left as they
// are. The id is spent: asked for again, with its payload or another, it is
// INVALID_STATE naming the run and step, at id, and nothing is written; an answer that
// comes after (a twin's, a resend's) stores nothing; recording again trims nothing. A
// command stored by an older registry (no role, written as it wrote it) is trimmed too.
func TestRecordedAgentCommands(t *testing.T) {
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) { recordedAgentCommands(t, b.place(t)) })
	}
}

func recordedAgentCommands(t *testing.T, open opener) {
	s, err := open(t, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const attempt = "wf_0123456789abcdef:main.3:a1"
	quote := json.RawMessage(`{"eventLog":"` + strings.Repeat("A", 40<<10) + `"}`)
	type command struct {
		agent, id string
		answer    *proto.Result
	}
	commands := []command{
		{"n1", attempt, &proto.Result{Result: json.RawMessage(`{"ok":true}`)}},
		{"n1", attempt + ":tpm-quote", &proto.Result{Result: quote}},
		{"n1", attempt + ":tpm-activate", &proto.Result{Error: proto.Errorf(proto.DriverError, "no TPM")}},
		{"n1", attempt + ":pending", nil},
		{"n1", "wf_0123456789abcdef:main.3:a10", &proto.Result{Result: quote}},
		{"n2", attempt, &proto.Result{Result: quote}},
	}
	payload := json.RawMessage(`{"nonce":"bm9uY2U="}`)
	mustUpdate(t, s, func(tx *Tx) error {
		for _, c := range commands {
			if _, err := tx.EnqueueAgentCommand(c.agent, proto.RoleRamdisk, proto.Command{ID: c.id, Kind: proto.CommandTPMQuote, Payload: payload}, json.RawMessage(`"a2VwdA=="`)); err != nil {
				return err
			}
			if c.answer != nil {
				res := *c.answer
				res.ID = c.id
				if _, err := tx.CompleteAgentCommand(c.agent, res); err != nil {
					return err
				}
			}
		}
		// As an older registry stored it: no role, no recorded.
		return storeAsEarlier(tx, AgentCommand{Node: "n1", ID: attempt + ":old", Kind: "echo", Payload: payload, Done: true, Result: quote})
	})
	var told []string
	s.OnAgentCommand(func(c AgentCommand) {
		if c.Recorded != nil {
			told = append(told, c.ID)
		}
	})
	var n int
	mustUpdate(t, s, func(tx *Tx) (err error) {
		n, err = tx.RecordAgentCommands("n1", attempt, "wf_0123456789abcdef", "steps[3]")
		return err
	})
	if n != 4 {
		t.Errorf("recorded %d commands, want 4: the attempt's, its tpm-quote, tpm-activate and old", n)
	}
	if len(told) != 4 {
		t.Errorf("the OnAgentCommand hooks were told of %v, want the 4 recorded", told)
	}
	s.Close()
	if s, err = open(t, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	read := func(agent, id string) (c AgentCommand, size int) {
		t.Helper()
		mustUpdate(t, s, func(tx *Tx) (err error) {
			size = len(tx.kv.get(bucketAgentCommands, commandKey(agent, id)))
			c, err = tx.AgentCommand(agent, id)
			return err
		})
		return c, size
	}
	sum := func(b []byte) []byte { d := sha256.Sum256(b); return d[:] }
	for _, id := range []string{attempt, attempt + ":tpm-quote", attempt + ":tpm-activate", attempt + ":old"} {
		c, size := read("n1", id)
		if !c.Done || c.Recorded == nil || len(c.Payload) > 0 || len(c.Kept) > 0 || len(c.Result) > 0 || c.Error != nil {
			t.Errorf("%s once recorded: %+v; want done, recorded, and no payload, kept value or answer", id, c)
			continue
		}
		if size > 600 {
			t.Errorf("%s once recorded takes %d bytes, want at most 600", id, size)
		}
		r := c.Recorded
		if r.Workflow != "wf_0123456789abcdef" || r.Step != "steps[3]" || !bytes.Equal(r.PayloadSHA256, sum(payload)) {
			t.Errorf("%s: recorded %+v, want workflow, step and the payload's digest", id, r)
		}
		switch id {
		case attempt + ":tpm-quote":
			if !bytes.Equal(r.AnswerSHA256, sum(quote)) {
				t.Errorf("%s: the answer's digest is not the quote's", id)
			}
		case attempt + ":tpm-activate":
			if r.ErrorCode != proto.DriverError {
				t.Errorf("%s: recorded error code %q, want %s", id, r.ErrorCode, proto.DriverError)
			}
		}
	}
	for _, k := range []struct{ agent, id string }{{"n1", attempt + ":pending"}, {"n1", "wf_0123456789abcdef:main.3:a10"}, {"n2", attempt}} {
		if c, _ := read(k.agent, k.id); c.Recorded != nil || !bytes.Equal(c.Payload, payload) || c.Done && !bytes.Equal(c.Result, quote) {
			t.Errorf("%s/%s, not of the attempt or pending, was changed: %+v", k.agent, k.id, c)
		}
	}
	// The quote's id is spent: asked for again, answered again, recorded again.
	before, _ := read("n1", attempt+":tpm-quote")
	for name, p := range map[string]json.RawMessage{"as it was": payload, "made anew": json.RawMessage(`{"nonce":"b3RoZXI="}`)} {
		err := s.Update(func(tx *Tx) error {
			_, err := tx.EnqueueAgentCommand("n1", proto.RoleRamdisk, proto.Command{ID: attempt + ":tpm-quote", Kind: proto.CommandTPMQuote, Payload: p}, nil)
			return err
		})
		if e := proto.AsError(err); proto.CodeOf(err) != proto.InvalidState || e.Details.Path != "id" || !strings.Contains(e.Message, "wf_0123456789abcdef") || !strings.Contains(e.Message, "steps[3]") {
			t.Errorf("a recorded command asked for again %s: %v; want INVALID_STATE at id naming the workflow and step", name, err)
		}
	}
	mustUpdate(t, s, func(tx *Tx) error {
		_, err := tx.CompleteAgentCommand("n1", proto.Result{ID: attempt + ":tpm-quote", Result: quote})
		return err
	})
	mustUpdate(t, s, func(tx *Tx) (err error) {
		n, err = tx.RecordAgentCommands("n1", attempt, "wf_other", "steps[9]")
		return err
	})
	if after, _ := read("n1", attempt+":tpm-quote"); n != 0 || !cmp.Equal(before, after) {
		t.Errorf("after a late answer and a second record (%d trimmed): %+v, want it as it was: %+v", n, after, before)
	}
	mustUpdate(t, s, func(tx *Tx) error {
		p, err := tx.PendingAgentCommands("n1")
		if len(p) != 1 || p[0].ID != attempt+":pending" {
			t.Errorf("pending: %v, want only the pending one", p)
		}
		return err
	})
}

// enqueueAnswered enqueues agent's command id (an echo for a ramdisk) and, when
// answered, records an answer to it.
func enqueueAnswered(tx *Tx, agent, id string, answered bool) error {
	if _, err := tx.EnqueueAgentCommand(agent, proto.RoleRamdisk, proto.Command{ID: id, Kind: "echo"}, nil); err != nil || !answered {
		return err
	}
	_, err := tx.CompleteAgentCommand(agent, proto.Result{ID: id, Result: json.RawMessage(`{}`)})
	return err
}

// TestDropPendingAgentCommands: a run's end drops the agent's commands of the run that
// await an answer, and nothing else: not the answered ones, not another run's (one whose
// id extends the run's), not another agent's (one whose id extends the agent's). It reads
// only the agent's commands under the prefix: a record of another agent that does not
// decode does not fail it, where a walk of the whole bucket (as before) fails on it.
func TestDropPendingAgentCommands(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, err := open(t, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		const run = "wf_0123456789abcdef"
		type command struct {
			agent, id string
			answered  bool
			dropped   bool
		}
		commands := []command{
			{"n1", run + ":main.0:a1", false, true},
			{"n1", run + ":main.0:a1:sub", false, true},
			{"n1", run + ":cleanup.0:a2", false, true},
			{"n1", run + ":main.1:a1", true, false},
			{"n1", run + "0:main.0:a1", false, false},
			{"n1", "wf_fedcba9876543210:main.0:a1", false, false},
			{"n10", run + ":main.0:a1", false, false},
			{"n", run + ":main.0:a1", false, false},
			{"rack-a", run + ":main.0:a1", false, false},
		}
		mustUpdate(t, s, func(tx *Tx) error {
			for _, c := range commands {
				if err := enqueueAnswered(tx, c.agent, c.id, c.answered); err != nil {
					return err
				}
			}
			// Damaged, beside the agent's range on either side.
			for _, k := range []string{"n0/" + run + ":main.0:a1", "n10/" + run + ":main.0:a2"} {
				if err := tx.kv.put(bucketAgentCommands, []byte(k), []byte("not a record")); err != nil {
					return err
				}
			}
			return nil
		})
		var n int
		mustUpdate(t, s, func(tx *Tx) (err error) { n, err = tx.DropPendingAgentCommands("n1", run+":"); return err })
		if n != 3 {
			t.Errorf("dropped %d commands, want the 3 of n1 pending under %s:", n, run)
		}
		mustUpdate(t, s, func(tx *Tx) error {
			for _, c := range commands {
				_, err := tx.AgentCommand(c.agent, c.id)
				if c.dropped && proto.CodeOf(err) != proto.NotFound || !c.dropped && err != nil {
					t.Errorf("%s/%s (answered %v): %v; want it dropped %v", c.agent, c.id, c.answered, err, c.dropped)
				}
			}
			return nil
		})
		mustUpdate(t, s, func(tx *Tx) (err error) { n, err = tx.DropPendingAgentCommands("n1", run+":"); return err })
		if n != 0 {
			t.Errorf("dropped %d commands the second time, want none", n)
		}
	})
}

// storeAsEarlier stores c as a registry of an earlier release did, written straight into
// its bucket (without what this release adds), with the expiry entry its raise to Format
// gave it (indexAgentCommands).
func storeAsEarlier(tx *Tx, c AgentCommand) error {
	if err := tx.put(bucketAgentCommands, commandKey(c.Node, c.ID), c); err != nil {
		return err
	}
	return tx.putRaw(bucketAgentCommandsByExpiry, expiryKey(c), nil)
}

// TestWithdrawAgentCommands: the pending commands of one attempt (its id, and those
// under it) are recorded answered with the attempt's error, the message saying they
// were withdrawn; an answered one keeps its answer, and another attempt's (a10 beside
// a1), another agent's, are left pending.
func TestWithdrawAgentCommands(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, err := open(t, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		const attempt = "wf_0123456789abcdef:main.0:a1"
		type command struct {
			agent, id string
			answered  bool
			withdrawn bool
		}
		commands := []command{
			{"n1", attempt, false, true},
			{"n1", attempt + ":sub", false, true},
			{"n1", attempt + ":done", true, false},
			{"n1", attempt + "0", false, false},
			{"n10", attempt, false, false},
		}
		mustUpdate(t, s, func(tx *Tx) error {
			for _, c := range commands {
				if err := enqueueAnswered(tx, c.agent, c.id, c.answered); err != nil {
					return err
				}
			}
			return nil
		})
		why := proto.Errorf(proto.Timeout, "the step's timeout ran out")
		var n int
		mustUpdate(t, s, func(tx *Tx) (err error) { n, err = tx.WithdrawAgentCommands("n1", attempt, why); return err })
		if n != 2 {
			t.Errorf("withdrew %d commands, want the 2 of n1 pending under %s", n, attempt)
		}
		mustUpdate(t, s, func(tx *Tx) error {
			for _, c := range commands {
				got, err := tx.AgentCommand(c.agent, c.id)
				switch {
				case err != nil:
					t.Errorf("%s/%s: %v", c.agent, c.id, err)
				case c.withdrawn && (!got.Done || got.Error == nil || got.Error.Code != proto.Timeout || !strings.Contains(got.Error.Message, "was withdrawn")):
					t.Errorf("%s/%s: done %v, error %v; want it withdrawn with TIMEOUT", c.agent, c.id, got.Done, got.Error)
				case !c.withdrawn && (got.Done != c.answered || got.Error != nil):
					t.Errorf("%s/%s: done %v, error %v; want it as it was", c.agent, c.id, got.Done, got.Error)
				}
			}
			return nil
		})
	})
}

// TestAttemptAnswered: an attempt resumed after its timeout ran out reads an answer of
// its own commands (its id, or one under it) that its run has not recorded yet; a
// pending command, an answer already recorded, another attempt's whose id extends this
// one's, and another agent's do not count.
func TestAttemptAnswered(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, err := open(t, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		const attempt = "wf_0123456789abcdef:main.0:a1"
		answered := func(agent string) bool {
			t.Helper()
			var got bool
			mustUpdate(t, s, func(tx *Tx) (err error) { got, err = tx.AttemptAnswered(agent, attempt); return err })
			return got
		}
		mustUpdate(t, s, func(tx *Tx) error {
			for _, c := range []struct {
				agent, id string
				answered  bool
			}{{"n1", attempt, false}, {"n1", attempt + "0", true}, {"n10", attempt, true}, {"n2", attempt + ":sub", true}} {
				if err := enqueueAnswered(tx, c.agent, c.id, c.answered); err != nil {
					return err
				}
			}
			return nil
		})
		if answered("n1") {
			t.Error("n1: its attempt's command is pending and another attempt's answered, yet it reads as answered")
		}
		if !answered("n2") {
			t.Error("n2: the answer under its attempt's id does not count")
		}
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.RecordAgentCommands("n2", attempt, "wf_0123456789abcdef", "main.0")
			return err
		})
		if answered("n2") {
			t.Error("n2: an answer its run recorded already counts again")
		}
	})
}
