package agents

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/store"
)

func TestCalls(t *testing.T) {
	var cs calls
	cs.init()
	a, first := cs.join("n1", "c1")
	b, second := cs.join("n1", "c1")
	if !first || second || a != b {
		t.Fatalf("two callers of one command: first %v, second %v, same call %v", first, second, a == b)
	}
	cs.leave("n1", "c1", b)
	cs.complete(store.AgentCommand{Node: "n1", ID: "c1", Result: []byte(`1`)})
	select {
	case <-a.done:
	default:
		t.Fatal("the waiting caller was not told")
	}
	if string(a.cmd.Result) != "1" {
		t.Errorf("result %s", a.cmd.Result)
	}
	cs.leave("n1", "c1", a)
	c, first := cs.join("n1", "c1")
	if !first || c == a {
		t.Fatal("a command asked again after its answer is a new call")
	}
	cs.leave("n1", "c1", c)
	if len(cs.m) != 0 {
		t.Errorf("calls left: %v", cs.m)
	}
}

// TestSendingTellsCommandsApart: a command on its way on a session is not sent there
// again, but a command of the same id stored anew (asked for again once the store forgot
// the earlier one, CommandTTL) is, while the earlier one's delivery is still
// ending: otherwise it waits, unsent, for the agent's next session.
func TestSendingTellsCommandsApart(t *testing.T) {
	var s session
	noWithdraw := func(error) {}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	first := store.AgentCommand{Node: "n1", ID: "c1", Kind: "echo", CreatedAt: at}
	again := first
	again.CreatedAt = at.Add(time.Millisecond)
	if !s.startSending(sendKeyOf(first), noWithdraw) {
		t.Fatal("a command on no way yet was not sent")
	}
	// Read back from the store (JSON): the same command.
	b, _ := json.Marshal(first)
	var read store.AgentCommand
	json.Unmarshal(b, &read)
	if s.startSending(sendKeyOf(read), noWithdraw) {
		t.Error("a command on its way was sent again (read back from the store)")
	}
	if !s.startSending(sendKeyOf(again), noWithdraw) {
		t.Error("the command stored anew under the same id was not sent while the earlier one's delivery ends")
	}
	s.doneSending(sendKeyOf(first))
	if !s.startSending(sendKeyOf(first), noWithdraw) {
		t.Error("a command whose delivery ended was not sent again")
	}
}
