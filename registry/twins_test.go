package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
)

// twinAnswerBound is how long TestTwoAgentsOfOneNode lets a relayed command wait for its
// answer. The registry sends a command to the session holding its node when it is
// stored, and again in each later session's hello; the session answers within a round
// trip. Two agents of one node take turns: the replaced one waits its longest backoff
// (twinBackoff.Max) and replaces the other, so a command waits at most about one turn
// (the backoff, a handshake, a hello): a fraction of a second here. The bound is many
// times that, so that no loaded machine fails a correct registry; a command the
// registry lost is never answered at all.
const twinAnswerBound = 20 * time.Second

// twinBackoff is the reconnect policy of the agents of TestTwoAgentsOfOneNode.
var twinBackoff = session.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}

// twinProcess is one agent process of a node whose certificate another process holds too:
// when it started, and how often it ran each command.
type twinProcess struct {
	name    string
	started time.Time
	stop    func()

	mu  sync.Mutex
	ran map[string]int
}

// TestTwoAgentsOfOneNode runs two agent processes with one node's certificate side by
// side (an agent restarted while its old process still runs, a cloned disk, a stolen
// certificate), with the real session code over QUIC: each session replaces the other's
// in turn. Every 25 commands one of the two stops and a new process takes its place.
// Meanwhile commands are relayed to the node, and NodeSpecs pushed to it: each command
// by one caller or by three at once (a step and its retry), every seventh once more a
// moment later (a caller that comes back for an answer). Every relay gets its own
// command's answer within twinAnswerBound; no process runs a command twice, and none runs
// one whose answer was returned before the process started.
func TestTwoAgentsOfOneNode(t *testing.T) {
	f := serveBusy(t, Config{})
	f.must(f.admin.Call(context.Background(), "sites.create", api.CreateSiteRequest{Name: "rack-a", BMCNetworks: []string{"10.0.0.0/24"}}, nil), "sites.create")
	const node = "gpu-twin"
	creds, err := f.join(node, "node", f.mint(store.TokenProvisioned, node))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		procs    []*twinProcess
		answered = map[string]time.Time{} // when a relay of each command last returned
	)
	start := func() *twinProcess {
		mu.Lock()
		p := &twinProcess{name: fmt.Sprintf("process %d", len(procs)), started: time.Now(), ran: map[string]int{}}
		procs = append(procs, p)
		mu.Unlock()
		s, err := session.New(session.Config{
			Addr: creds.Config.AgentEndpoint, Certificate: creds.Certificate, ServerCAs: creds.ServingCAs,
			// Each process reports its own inventory: every hello of the other's changes it.
			Inventory: map[string]json.RawMessage{"process": json.RawMessage(fmt.Sprintf("%q", p.name))},
			Handlers: map[string]session.Handler{"echo": func(_ context.Context, in json.RawMessage) (json.RawMessage, error) {
				var id string
				if err := json.Unmarshal(in, &id); err != nil {
					return nil, err
				}
				p.mu.Lock()
				p.ran[id]++
				p.mu.Unlock()
				return in, nil
			}},
			Backoff:   twinBackoff,
			KeepAlive: 200 * time.Millisecond,
			Log:       slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		p.stop = func() { cancel(); <-done }
		return p
	}
	live := []*twinProcess{start(), start()}
	defer func() {
		for _, p := range live {
			p.stop()
		}
	}()

	relay := func(id string) {
		payload := fmt.Sprintf("%q", id)
		ctx, cancel := context.WithTimeout(context.Background(), twinAnswerBound)
		defer cancel()
		got, err := f.r.plane.ep.Relay(ctx, node, proto.Command{ID: id, Kind: "echo", Payload: json.RawMessage(payload)})
		mu.Lock()
		answered[id] = time.Now()
		mu.Unlock()
		if err != nil || string(got) != payload {
			t.Errorf("relay %s: %s, %v; want its own payload within %v", id, got, err, twinAnswerBound)
		}
	}
	var relays sync.WaitGroup
	for i := range 300 {
		id := fmt.Sprintf("c-%d", i)
		for range 1 + i%2*2 {
			relays.Go(func() { relay(id) })
		}
		if i%7 == 0 {
			relays.Go(func() { time.Sleep(3 * time.Millisecond); relay(id) })
		}
		if i%10 == 0 {
			f.must(f.bump(node, i), "storing a NodeSpec")
		}
		if i%25 == 24 {
			k := i / 25 % 2
			live[k].stop()
			live[k] = start()
		}
		time.Sleep(8 * time.Millisecond)
	}
	relays.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, p := range procs {
		p.mu.Lock()
		for id, n := range p.ran {
			if n > 1 {
				t.Errorf("%s ran %s %d times, want at most once", p.name, id, n)
			}
			if at := answered[id]; at.Before(p.started) {
				t.Errorf("%s ran %s, whose answer was returned %v before it started", p.name, id, p.started.Sub(at))
			}
		}
		p.mu.Unlock()
	}
}
