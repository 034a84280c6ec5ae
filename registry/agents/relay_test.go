package agents

import (
	"testing"

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
