package agentplane

import (
	"fmt"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// TestReturnAdapts restarts a registry whose stored plan asks 200 agents back far faster
// than its admission bound takes them: attempts are refused, each refused agent comes
// back after the stream's end, re-slotted (their backoff is 20 s: none would be back
// within the return's few seconds otherwise; one refused at each of its three re-slotted
// tries, as on a machine slowed by the race detector, is back after it), and the
// registry plans the next return from the handshakes it completed while it
// refused, and stores the plan, which the next stop tells the fleet and the next
// endpoint starts from.
func TestReturnAdapts(t *testing.T) {
	const n = 200
	e := newEnv(t, agents.Config{})
	e.stop()
	// Room for every agent's first (full) handshake; the bound shrinks before the return.
	seed := store.AgentReturn{Rate: 20000, Admission: n}
	putPlan(t, e, seed)
	e.start()
	var fleet []*agent
	for i := range n {
		fleet = append(fleet, e.startAgent(fmt.Sprintf("back-%03d", i), func(c *session.Config) {
			c.KeepAlive = 5 * time.Second
			c.Backoff = session.Backoff{Min: 20 * time.Second, Max: 20 * time.Second}
		}))
		if i%20 == 19 { // a few full handshakes at a time: a first dial that failed would wait 10-20 s
			waitFor(t, "the agents connected", func() bool { return e.ep.Sessions() == i+1 })
		}
	}

	e.stop()
	stopped := readPlan(t, e)
	if stopped.Told != n || stopped.Rate != seed.Rate {
		t.Fatalf("plan stored at the stop: %+v, want %d told at %v a second", stopped, n, seed.Rate)
	}
	stopped.Admission = 16
	putPlan(t, e, stopped)
	e.start()
	// Agents come back by re-slotting after the stream, and those refused at every
	// re-slotted try after their backoff: on a loaded machine that takes longer than
	// waitFor's 20 s.
	testkit.WaitFor(t, "every agent back", 2*time.Minute, 5*time.Millisecond, func() bool { return e.ep.Sessions() == n })
	if hs := e.ep.Handshakes(); hs.Refused == 0 {
		t.Fatalf("handshakes %+v: want attempts refused past the bound of %d", hs, stopped.Admission)
	}
	// The registry counts the attempts refused as the agents do, told in their hellos,
	// where its own count of refused first packets may run ahead of them.
	var attempts int64
	for _, a := range fleet {
		attempts += a.Refused()
	}
	if hs := e.ep.Handshakes(); hs.RefusedAttempts != attempts || hs.Refused < attempts {
		t.Fatalf("handshakes %+v: want the %d attempts the agents count refused, no more than the first packets refused", hs, attempts)
	}
	waitFor(t, "the return measured", func() bool { return e.ep.Return().Accepted > 0 })
	next := e.ep.Return()
	if next.Refused != attempts {
		t.Fatalf("next plan %+v: want it planned on the %d attempts the agents count refused", next, attempts)
	}
	if next.MeasuredRate <= 0 || next.Rate >= seed.Rate || next.Rate != max(100, next.MeasuredRate) {
		t.Fatalf("next plan %+v: want the rate measured while refusing, below the %v asked", next, seed.Rate)
	}
	if next.Admission < 64 || next.Admission > 192 || next.Refused == 0 || next.Told != 0 {
		t.Fatalf("next plan %+v: want an admission bound of 64 to 192, the refusals counted, no return pending", next)
	}
	if got := readPlan(t, e); got.Rate != next.Rate || got.Admission != next.Admission {
		t.Fatalf("stored plan %+v, want the measured one %+v", got, next)
	}

	// The next stop asks for the adapted stream, and the next endpoint starts from it.
	e.stop()
	if got := readPlan(t, e); got.Told != n || got.Rate != next.Rate {
		t.Fatalf("plan stored at the next stop: %+v, want %d told at %v a second", got, n, next.Rate)
	}
	e.start()
	if got := e.ep.Return(); got.Rate != next.Rate || got.Admission != next.Admission {
		t.Fatalf("restarted endpoint's plan %+v, want the stored one", got)
	}
	testkit.WaitFor(t, "every agent back again", 2*time.Minute, 5*time.Millisecond, func() bool { return e.ep.Sessions() == n })
}

// TestALieAboutRefusalsMovesNoPlan: a node's agent that tells, in its hello, of a
// million attempts refused at admission, to have the registry plan its fleet's next
// return slower, adds at most a few to the registry's count of attempts refused, and
// the return is planned on no more refusals than the registry's own count of refused
// first packets: here none.
func TestALieAboutRefusalsMovesNoPlan(t *testing.T) {
	e := newEnv(t, agents.Config{})
	e.stop()
	seed := store.AgentReturn{Rate: 1000, Admission: 128, Told: 1}
	putPlan(t, e, seed)
	e.start()
	lie := int64(1_000_000)
	sessionOverQUIC(t, e, "liar", proto.Hello{RefusedAttempts: &lie})
	waitFor(t, "the return measured", func() bool { return e.ep.Return().Accepted > 0 })
	if hs := e.ep.Handshakes(); hs.Refused != 0 || hs.RefusedAttempts <= 0 || hs.RefusedAttempts > 8 {
		t.Fatalf("handshakes %+v: want none refused, the lie counted a few attempts at most", hs)
	}
	if next := e.ep.Return(); next.Refused != 0 || next.Rate != seed.Rate || next.MeasuredRate != 0 {
		t.Fatalf("next plan %+v: want it planned on no refusal, its rate %v kept", next, seed.Rate)
	}
}

// putPlan stores plan in the stopped env's store.
func putPlan(t *testing.T, e *env, plan store.AgentReturn) {
	t.Helper()
	st, err := store.Open(e.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Update(func(tx *store.Tx) error { return tx.PutAgentReturn("", plan) }); err != nil {
		t.Fatal(err)
	}
}

// readPlan reads the plan from the env's store, running or stopped.
func readPlan(t *testing.T, e *env) store.AgentReturn {
	t.Helper()
	st := e.st
	if st == nil {
		var err error
		if st, err = store.Open(e.dir, store.Options{}); err != nil {
			t.Fatal(err)
		}
		defer st.Close()
	}
	var plan store.AgentReturn
	if err := st.View(func(tx *store.Tx) (err error) { plan, _, err = tx.AgentReturn(""); return err }); err != nil {
		t.Fatal(err)
	}
	return plan
}
