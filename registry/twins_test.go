package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/quic-go/quic-go"
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
// its address, when it started, and how often it ran each command.
type twinProcess struct {
	name, addr string
	started    time.Time
	stop       func()

	mu  sync.Mutex
	ran map[string]int
}

// TestTwoAgentsOfOneNode runs agent processes of one node's certificate, with the real
// session code over QUIC. First an agent restarted while its old process still runs
// (that one waits its longest backoff, minutes here): its new session replaces the old
// one once, which is counted and not warned of. Then two processes side by side (an
// agent restarted while its old process still runs, a cloned disk, a stolen
// certificate): each session replaces the other's in turn, and every 25 commands one of
// the two stops and a new process takes its place. Meanwhile commands are relayed to the
// node, and NodeSpecs pushed to it: each command by one caller or by three at once (a
// step and its retry), every seventh once more a moment later (a caller that comes back
// for an answer). Every relay gets its own command's answer within twinAnswerBound; no
// process runs a command twice, and none runs one whose answer was returned before the
// process started. The registry warns once (at most once every ten minutes per node)
// that two agents hold the node's certificate, naming it, the addresses of two of the
// processes and the command that revokes the identity, and its metrics count the turns.
// Revoking the identity ends the session, and neither agent holds one again.
func TestTwoAgentsOfOneNode(t *testing.T) {
	warnings := &twinWarnings{}
	f := serveBusy(t, Config{Log: slog.New(warnings)})
	storetest.Fill(t, f.r.st)
	node, creds := f.provisioned("52:54:00:00:07:01")
	var (
		mu       sync.Mutex
		procs    []*twinProcess
		answered = map[string]time.Time{} // when a relay of each command last returned
	)
	start := func(backoff session.Backoff) *twinProcess {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		tr := &quic.Transport{Conn: udp}
		mu.Lock()
		p := &twinProcess{name: fmt.Sprintf("process %d", len(procs)), addr: udp.LocalAddr().String(), started: time.Now(), ran: map[string]int{}}
		procs = append(procs, p)
		mu.Unlock()
		s, err := session.New(session.Config{
			Addr: creds.Config.AgentEndpoint, Certificate: creds.Certificate, ServerCAs: creds.ServingCAs, Transport: tr,
			// Each process reports its own inventory: every hello of the other's changes it.
			Inventory: map[string]json.RawMessage{proto.SectionHost: json.RawMessage(fmt.Sprintf("%q", p.name))},
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
			Backoff:   backoff,
			KeepAlive: 200 * time.Millisecond,
			Log:       slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		p.stop = func() { cancel(); <-done; tr.Close() }
		return p
	}
	ep := f.r.plane.ep

	// An agent restarted once while its old process still runs: one replacement, no warning.
	old := start(session.Backoff{Min: 5 * time.Minute, Max: 10 * time.Minute})
	f.wait("the first agent's session", func() bool { return ep.Connected(node, proto.RoleNode) })
	restarted := start(twinBackoff)
	f.wait("the restarted agent's session replacing the first's", func() bool { return ep.Replacements().First == 1 })
	old.stop()
	if r := ep.Replacements(); r != (agents.Replacements{First: 1}) {
		t.Errorf("an agent restarted once: %+v, want one first replacement", r)
	}
	if w := warnings.list(); len(w) != 0 {
		t.Errorf("an agent restarted once was warned of: %v", w)
	}

	live := []*twinProcess{restarted, start(twinBackoff)}
	defer func() {
		for _, p := range live {
			p.stop()
		}
	}()

	relay := func(id string) {
		payload := fmt.Sprintf("%q", id)
		ctx, cancel := context.WithTimeout(context.Background(), twinAnswerBound)
		defer cancel()
		got, err := f.r.plane.ep.Relay(ctx, node, proto.RoleNode, proto.Command{ID: id, Kind: "echo", Payload: json.RawMessage(payload)})
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
			live[k] = start(twinBackoff)
		}
		time.Sleep(8 * time.Millisecond)
	}
	relays.Wait()

	mu.Lock()
	defer mu.Unlock()
	addrs := map[string]string{}
	for _, p := range procs {
		addrs[p.addr] = p.name
	}
	if w := warnings.list(); len(w) != 1 {
		t.Errorf("the registry warned %d times of the node's turns, want once: %v", len(w), w)
	} else if a, b := addrs[w[0]["remote"]], addrs[w[0]["replaced"]]; w[0]["node"] != node || a == "" || b == "" || a == b ||
		!strings.Contains(w[0]["next"], "better-compute nodes retire "+node) {
		t.Errorf("the warning %v: want the node, the addresses of two of its agents (%v) and the command revoking its identity", w[0], addrs)
	}
	// The two agents still take turns while the endpoint is scraped: the scrape reads the
	// count of some moment between the reads before and after it.
	before := ep.Replacements()
	again := scrapeCounter(t, f.r.Info().MetricsURL, `better_compute_agent_sessions_replaced_total{turn="again"}`)
	if r := ep.Replacements(); before.Again == 0 || again < float64(before.Again) || again > float64(r.Again) || r.First < 1 {
		t.Errorf("replacements: %+v before the scrape, %+v after, scraped again %v; want the turns counted and scraped", before, r, again)
	}

	// The identity revoked, as metal.revokeIdentity does: its commit ends the session,
	// and neither agent holds one again, however often each tries.
	storetest.Update(t, f.r.st, func(tx *store.Tx) error {
		_, err := tx.UpdateNode(node, func(n *store.Node) error { n.IdentityRevokedAt = tx.Now(); return nil })
		return err
	})
	tried := ep.Handshakes().Accepted
	f.wait("both agents trying again twice each", func() bool { return ep.Handshakes().Accepted >= tried+4 })
	if ep.Connected(node, proto.RoleNode) {
		t.Error("an agent of the revoked identity holds a session")
	}

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

// twinWarnings is a log handler keeping the registry's warnings that two agents hold one
// node's certificate, each as its attributes (those of the record: the endpoint logs
// with its logger as it is given).
type twinWarnings struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (w *twinWarnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (w *twinWarnings) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "two agents hold the certificate of one node") {
		return nil
	}
	rec := map[string]string{}
	r.Attrs(func(a slog.Attr) bool { rec[a.Key] = a.Value.String(); return true })
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recs = append(w.recs, rec)
	return nil
}

func (w *twinWarnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *twinWarnings) WithGroup(string) slog.Handler      { return w }

// list is the warnings so far.
func (w *twinWarnings) list() []map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.recs)
}

// scrapeCounter is the value of series (a name and its labels, as scraped) at url.
func scrapeCounter(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("%s scraped no %s", url, series)
	return 0
}
