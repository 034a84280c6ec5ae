package session

import "testing"

// TestPickSpreadsOverTheOthers: after each connection an agent moves on to another of
// its registry's endpoints, never the same one, and the agents of one endpoint spread
// evenly over the others (they would all move to the same one if each took the next
// in its list, as the agents' lists are alike).
func TestPickSpreadsOverTheOthers(t *testing.T) {
	a := newTestAgent(t, "node", Config{Addrs: []string{"127.0.0.2:1", "127.0.0.3:1", "127.0.0.4:1"}})
	if len(a.endpoints) != 4 {
		t.Fatalf("%d endpoints, want 4", len(a.endpoints))
	}
	const agents = 3000
	moved := make([]int, len(a.endpoints))
	for range agents {
		a.next = 1
		if ep := a.pick(); ep != a.endpoints[1] {
			t.Fatalf("picked %v, not the endpoint next named", ep.addr)
		}
		moved[a.next]++
	}
	if moved[1] != 0 {
		t.Errorf("%d agents of the endpoint moved to it again", moved[1])
	}
	for i, n := range moved {
		if i != 1 && (n < agents/3*8/10 || n > agents/3*12/10) {
			t.Errorf("endpoint %d took %d of %d agents, want about a third: %v", i, n, agents, moved)
		}
	}
	one := newTestAgent(t, "node", Config{})
	if one.pick(); one.next != 0 {
		t.Errorf("an agent with one endpoint moved to %d", one.next)
	}
}
