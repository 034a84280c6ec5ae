package agentplane

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/quic-go/quic-go"
)

// BenchmarkAgentSessions holds BC_LOAD_AGENTS agent sessions (10,000 by default) against
// one registry endpoint in this process (recording each session in the store as the
// registry does, workflow.JoinLog), the agents in child processes of
// BC_LOAD_PER_PROCESS sessions each (5,000), all on loopback QUIC. Two agent processes
// rather than more: each process is a Go scheduler of its own competing for the same two
// cores, and with five of them a reconnect's handshake waited long enough between its
// steps that the endpoint's admission places filled and most attempts were refused (README,
// "Agent plane"). It measures:
//
//   - connect: from starting the agent processes until every agent has said hello and
//     acknowledged generation 1;
//   - push: from a NodeSpec change of every node (one transaction) until every agent has
//     acknowledged the new generation, with when the change was written and when half,
//     90%, 99% and all of the agents had acknowledged it (where a slow push lost its time);
//   - memory per session: the registry's heap in use, goroutine stacks and RSS after a
//     GC, less what it held before the agents came, divided by the sessions; after the
//     connect, and again after the two returns (a fleet held after a restart);
//   - the push window: the most pushes in flight, and its size after the push;
//   - the push's paths: the registry's probe timeouts of the sessions as the push starts
//     (agents.Endpoint.Paths) and the sessions whose stale estimate it re-measured until
//     then (at their pings, a keep-alive period after their connect: few before the
//     push), and the packets it sent that QUIC declared lost during the push, beside
//     the UDP datagrams the host dropped: a push packet lost waits out its session's
//     probe timeout before it is sent again;
//   - reconnects, twice: the endpoint is closed (agents are told when to come back) and a
//     new one started on the same store and address; from then until every agent is
//     back. Between the two the closed fleet's heap is collected: a registry restarts as
//     a new process, whose collector starts from what it holds, not from the heap of the
//     fleet its old process held (in which the first collection of the return would come
//     only after thousands of handshakes, and their sessions would sit among more
//     garbage). The first return is told the plan an endpoint starts with, the second the
//     plan the first return's measure made (agents.Endpoint.Return). Each prints the
//     refusals at admission in each second from the stop, and about when the stream the
//     agents were told ended: refusals within the stream, or after it. The endpoint
//     counts each copy of a first packet it refuses; the agents count attempts
//     (session.Agent.Refused), the figure for the goal's refused attempts
//     (refused-attempts; refused is the endpoint's), and those that heard nothing within
//     the handshake's timeout (session.Agent.Unanswered, unanswered-attempts: the
//     refusal of every copy of their first packet dropped, as the transport drops those
//     past the four it holds to send, or the endpoint not listening yet).
//
// Two peers, each BC_LOAD_PEERS bare quic-go connections (2,000 by default) from one
// child process to a bare listener in this process, measured before the agents start:
//
//   - memory: connections of quic-go's default configuration held idle; the ratio says
//     what a whole session costs against quic-go's own floor;
//   - reconnects: connections with the agent plane's TLS (TLS 1.3, client certificates,
//     X25519), each with a certificate of its own as each agent has, all closed and
//     dialled again as fast as the machine completes them, at most maxInFlight at a
//     time, each resuming its TLS session: what quic-go's resumed handshake alone does
//     on these two cores, with no session on top, no fleet held and no schedule to
//     keep.
//
// With BC_LOAD_STORIES=1, each agent keeps its last log records in memory (its debug
// ones too: the agents' processes spend a little more CPU) and each return prints the
// story of the last agent back: how the slowest of the fleet got there.
//
// With BC_LOAD_RESTART_PAUSE=DURATION, each restart waits that long between the stop and
// the next endpoint's start, as a registry process that takes that long to come back
// (its exit, its start, its store opened) does; 0 by default.
//
// With BC_LOAD_PROFILE=DIR, the registry's heap profile at full load and its CPU
// profiles of the push, the restarts and the reconnect peer's listener are written to
// DIR, with the first agent process's CPU profiles of the push and the restarts
// (agents-push.pprof, agents-restartN.pprof) and the peer dialler's
// (dialler-peer.pprof); beside each CPU profile, its process's allocations at the
// start and at the end of the span (NAME.allocs0, NAME.allocs1: the span's own with
// `go tool pprof -sample_index=alloc_space -base NAME.allocs0 NAME.allocs1`).
func BenchmarkAgentSessions(b *testing.B) {
	n, per, peers := envInt("BC_LOAD_AGENTS", 10000), envInt("BC_LOAD_PER_PROCESS", 5000), envInt("BC_LOAD_PEERS", 2000)
	var acked [4]atomic.Int64  // acknowledgements per generation
	var streamEnd atomic.Int64 // the last stop's stream end, from its start (ns)
	ca, server := newCA(b)
	e := startEnv(b, &env{t: b, ca: ca, server: server, dir: b.TempDir(), addr: "127.0.0.1:0", recordSessions: true, hooks: agents.Config{OnObserved: func(_ string, gen int64) {
		if gen < int64(len(acked)) {
			acked[gen].Add(1)
		}
	}, OnStop: func(returnIn, _ time.Duration) { streamEnd.Store(int64(returnIn)) }}})
	writeCA(b, e.ca, e.dir)
	setAll := func(round string) {
		err := e.st.Update(func(tx *store.Tx) error {
			for i := range n {
				if _, err := tx.SetNodeSpec(proto.NodeSpec{Node: nodeName(i), Role: proto.RoleNode, Labels: map[string]string{"round": round}}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	setAll("1")
	enterPhase(b, fmt.Sprintf("the idle peer, %d quic-go connections", peers))
	peer := barePeer(b, e.dir, peers)
	enterPhase(b, fmt.Sprintf("the reconnect peer, %d quic-go connections", peers))
	resume, bursts := resumePeer(b, e.dir, peers)
	// The registry's garbage collection as serve sets it by default, from here on: the
	// peers above run with Go's defaults, as a bare quic-go listener would.
	policy, err := registry.MemoryConfig{}.Policy(os.Getenv)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(policy.Apply())
	before := sampleMemory()

	enterPhase(b, fmt.Sprintf("connect, %d agents in processes of %d", n, per))
	connect := startPhase(nil)
	var children []*child
	for first := 0; first < n; first += per {
		children = append(children, startChild(b, "agents", "BC_DIR="+e.dir, "BC_ADDR="+e.addr, "BC_FIRST="+strconv.Itoa(first), "BC_COUNT="+strconv.Itoa(min(per, n-first))))
	}
	connect.children = children // their CPU from their start, making their keys included
	waitLong(b, "every agent at generation 1", func() bool { return acked[1].Load() == int64(n) && e.ep.Sessions() == n })
	connect.end()
	after := sampleMemory()
	if dir := os.Getenv("BC_LOAD_PROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, "heap.pprof"))
		if err != nil {
			b.Fatal(err)
		}
		pprof.WriteHeapProfile(f)
		f.Close()
	}

	enterPhase(b, "push")
	stopProfile := profileCPU(b, "push.pprof", children[0])
	push := startPhase(children)
	pushDrops := udpReceiveDrops()
	paths := e.ep.Paths()
	setAll("2")
	written := time.Since(push.start)
	pushed := quantiles{n: n}
	waitLong(b, "every agent at generation 2", func() bool { return pushed.observe(int(acked[2].Load()), push.start) })
	push.end()
	pushDrops = udpReceiveDrops() - pushDrops
	pushLost := e.ep.Paths().PacketsLost - paths.PacketsLost
	stopProfile()

	window := e.ep.PushWindow()

	// Two returns: the first at the plan an endpoint starts with, the second at the plan
	// the first one's measure made (agents.Endpoint.Return).
	var returns [2]*restartRun
	for i := range returns {
		returns[i] = restartAll(b, e, n, children, fmt.Sprintf("restart%d", i+1), &streamEnd)
	}
	returned := sampleMemory().minus(before).per(n)
	enterPhase(b, "stopping the agents")
	for _, c := range children {
		c.stop()
	}

	s := after.minus(before).per(n)
	fmt.Printf("agent plane: %d sessions, agents in %d processes; peer: %d idle quic-go connections of the default configuration\n", n, len(children), peers)
	fmt.Printf("  registry's garbage collection from the connect on: %v (the peers': Go's defaults)\n", policy.LogValue())
	connect.print("connect", n, "hello and acknowledgement of generation 1")
	push.print("push", n, "NodeSpec change of every node until every agent acknowledged it")
	fmt.Printf("  push: the change written in %.3fs; the agents' acknowledgements: %s\n", written.Seconds(), &pushed)
	fmt.Printf("  push window: at most %d pushes in flight, size %d after the push, %d acknowledgements late, halved %d times, %d timely ones at the growth limit; %d UDP datagrams dropped for full receive buffers during the push\n", window.MaxInFlight, window.Size, window.Late, window.Halvings, window.Limited, pushDrops)
	fmt.Printf("  push paths: the sessions' probe timeouts at the push's start median %v, 99th percentile %v, longest %v (a push packet lost waits that long, doubled with each probe lost; %s); %d packets the registry sent lost during the push\n",
		paths.ProbeTimeoutMedian.Round(time.Millisecond), paths.ProbeTimeoutP99.Round(time.Millisecond), paths.ProbeTimeoutMax.Round(time.Millisecond), remeasured(paths), int64(pushLost))
	resume.print("peer", peers, fmt.Sprintf("bare quic-go connections closed and dialled again, %d at a time, each resuming; the median of bursts of %s a second", maxInFlight, bursts))
	peerRate, peerCPU := float64(peers)/resume.wall.Seconds(), resume.cpu.Seconds()/float64(peers)
	diallerCPU := resume.agents.Seconds() / float64(peers)
	for i, r := range returns {
		r.print(fmt.Sprintf("restart%d", i+1), n)
		fmt.Printf("  restart%d/peer: reconnects a second %.2f, registry CPU a reconnect / listener CPU a handshake %.2f, agents' CPU a reconnect / dialler's CPU a handshake %.2f, CPU a reconnect (both ends) %.2f\n", i+1,
			r.rate()/peerRate, r.phase.cpu.Seconds()/float64(n)/peerCPU, r.phase.agents.Seconds()/float64(n)/diallerCPU, (r.phase.cpu+r.phase.agents).Seconds()*float64(peers)/((resume.cpu+resume.agents).Seconds()*float64(n)))
	}
	fmt.Printf("  memory per session:  %s\n", s.describe())
	fmt.Printf("  after the returns:   %s\n", returned.describe())
	fmt.Printf("  peer per connection: %s\n", peer.describe())
	fmt.Printf("  session/peer: in use+stacks %.2f, RSS %.2f\n", (s.heap+s.stack)/(peer.heap+peer.stack), s.rss/peer.rss)
	for i, r := range returns {
		fmt.Printf("  restart%d: RSS at most %s a session during the return (the process's peak less its RSS before the agents came)\n", i+1, kib((float64(r.phase.peakRSS)-before.rss)/float64(n)))
	}
	last := returns[len(returns)-1]
	b.ReportMetric(connect.wall.Seconds(), "connect-s")
	b.ReportMetric(push.wall.Seconds(), "push-s")
	b.ReportMetric(push.cpu.Seconds()*1000/float64(n), "push-registry-CPU-ms/session")
	b.ReportMetric(float64(window.MaxInFlight), "push-window-max")
	b.ReportMetric(returns[0].rate()/peerRate, "first-return/peer")
	b.ReportMetric(last.rate(), "reconnects/s")
	b.ReportMetric(peerRate, "peer-reconnects/s")
	b.ReportMetric(last.rate()/peerRate, "return/peer")
	b.ReportMetric(float64(last.hs.Refused), "refused")
	b.ReportMetric(float64(last.attempts), "refused-attempts")
	b.ReportMetric(float64(last.unanswered), "unanswered-attempts")
	b.ReportMetric(last.back.at[len(last.back.at)-1].Seconds()/last.back.at[2].Seconds(), "all/p99-time")
	b.ReportMetric(last.phase.cpu.Seconds()*1000/float64(n), "registry-CPU-ms/reconnect")
	b.ReportMetric(last.phase.cpu.Seconds()/float64(n)/peerCPU, "reconnect-CPU/peer")
	b.ReportMetric(last.phase.agents.Seconds()*1000/float64(n), "agents-CPU-ms/reconnect")
	b.ReportMetric(diallerCPU*1000, "dialler-CPU-ms/handshake")
	b.ReportMetric(last.phase.agents.Seconds()/float64(n)/diallerCPU, "agents-CPU/dialler")
	b.ReportMetric(s.heap+s.stack, "heap+stack-B/session")
	b.ReportMetric(s.rss, "RSS-B/session")
	b.ReportMetric(returned.heap+returned.stack, "returned-heap+stack-B/session")
	b.ReportMetric((float64(last.phase.peakRSS)-before.rss)/float64(n), "return-peak-RSS-B/session")
	b.ReportMetric((s.heap+s.stack)/(peer.heap+peer.stack), "ratio-to-quic-go")
}

// restartRun is one return of the fleet after a restart: its phase, when the agents
// were back, the new endpoint's handshakes and plan, how long the close took and the
// UDP datagrams the host dropped meanwhile.
type restartRun struct {
	phase *phase
	back  quantiles
	hs    agents.Handshakes
	// told is the plan the fleet was told and the endpoint started with, plan the one
	// the endpoint made of the return.
	told, plan store.AgentReturn
	closed     time.Duration
	// collected is how long collecting the closed fleet's heap took before the start.
	collected time.Duration
	// streamEnd is when the stream the agents were told ends, from the stop's start.
	streamEnd time.Duration
	// last is the story of the last agent back (BC_LOAD_STORIES), "" without it.
	last  string
	drops int
	// attempts is how many of the agents' attempts the endpoint refused at admission, by
	// the agents' count (one an attempt; hs.Refused counts each copy of a first packet
	// refused); unanswered how many heard nothing within the handshake's timeout, by the
	// agents' count (session.Agent.Unanswered: refusals the endpoint dropped among them).
	attempts, unanswered int64
	// refusedBy counts the endpoint's refusals at admission (first packets, as
	// hs.Refused) in each second from the stop's start: whether they came within the
	// stream the agents were told or after its end (agents re-slotted after a refusal).
	refusedBy []int64
}

// restartAll stops the endpoint (its agents are told when to come back), collects the
// closed fleet's heap, starts it again on the same store and address, and measures
// until every agent is back and the endpoint has measured the return: the phase name,
// its CPU profile name.pprof.
// streamEnd is where the endpoint's OnStop keeps the end of the stream the stop told.
func restartAll(b *testing.B, e *env, n int, children []*child, name string, streamEnd *atomic.Int64) *restartRun {
	enterPhase(b, name)
	r := &restartRun{back: quantiles{n: n}}
	dropsBefore := udpReceiveDrops()
	attemptsBefore, unansweredBefore := agentsCount(b, children, "refused"), agentsCount(b, children, "unanswered")
	closing := time.Now()
	e.stop()
	r.closed, r.streamEnd = time.Since(closing), time.Duration(streamEnd.Load())
	stopProfile := profileCPU(b, name+".pprof", children[0])
	time.Sleep(envDuration("BC_LOAD_RESTART_PAUSE", 0))
	collecting := time.Now()
	runtime.GC() // the closed fleet's heap, which a restarted registry's new process does not have
	r.collected = time.Since(collecting)
	e.start()
	r.told = e.ep.Return()
	r.phase = startPhase(children)
	var refused int64
	waitLong(b, "every agent back", func() bool {
		if h := e.ep.Handshakes(); h.Refused > refused {
			sec := int(time.Since(closing) / time.Second)
			for len(r.refusedBy) <= sec {
				r.refusedBy = append(r.refusedBy, 0)
			}
			r.refusedBy[sec] += h.Refused - refused
			refused = h.Refused
		}
		return r.back.observe(e.ep.Sessions(), r.phase.start)
	})
	r.phase.end()
	stopProfile()
	r.drops = udpReceiveDrops() - dropsBefore
	r.attempts = agentsCount(b, children, "refused") - attemptsBefore
	r.unanswered = agentsCount(b, children, "unanswered") - unansweredBefore
	r.hs = e.ep.Handshakes()
	waitLong(b, "the return measured", func() bool { return e.ep.Return().Told == 0 })
	r.plan = e.ep.Return()
	r.last = lastAgentBack(children) // after the wait: the last agent has logged its session
	return r
}

// rate is the return's reconnects a second.
func (r *restartRun) rate() float64 { return float64(r.back.n) / r.phase.wall.Seconds() }

func (r *restartRun) print(name string, n int) {
	start := r.streamEnd - time.Duration(float64(r.told.Told)/r.told.Rate*float64(time.Second))
	r.phase.print(name, n, fmt.Sprintf("endpoint closed in %.2fs, its fleet's heap collected in %.0fms, started again %.2fs after the stop; until every agent is back; told a stream of %.0f a second starting %.2fs after the stop, %d admission places",
		r.closed.Seconds(), float64(r.collected)/float64(time.Millisecond), r.told.Restart.Seconds(), r.told.Rate, start.Seconds(), r.told.Admission))
	fmt.Printf("  %s: agents back %s; handshakes: %d, %d of them resumed, %d refused at admission (%d attempts by the agents' count, %d as their hellos told the registry), %d abandoned; %d attempts unanswered within the handshake's timeout; %d UDP datagrams dropped for full receive buffers\n",
		name, &r.back, r.hs.Accepted, r.hs.Resumed, r.hs.Refused, r.attempts, r.hs.RefusedAttempts, r.hs.Abandoned, r.unanswered, r.drops)
	if len(r.refusedBy) > 0 {
		fmt.Printf("  %s: refused by second from the stop (the stream told ends %.1fs after it): %s\n", name, r.streamEnd.Seconds(), bySecond(r.refusedBy))
	}
	if r.last != "" {
		fmt.Printf("  %s: the last agent back: %s\n", name, r.last)
	}
	fmt.Printf("  %s: measured %.0f handshakes a second while refusing first packets (0: none refused), mean handshake %v, %d attempts refused; next return at %.0f a second, %d admission places\n",
		name, r.plan.MeasuredRate, r.plan.MeanHandshake.Round(time.Microsecond), r.plan.Refused, r.plan.Rate, r.plan.Admission)
}

// agentsCount is a count of the agents' attempts so far, summed over the agent
// processes children (runAgentsChild): what is "refused" (at admission) or "unanswered"
// (within the handshake's timeout).
func agentsCount(b *testing.B, children []*child, what string) int64 {
	var sum int64
	for _, c := range children {
		answer := c.ask(what)
		n, err := strconv.ParseInt(answer, 10, 64)
		if err != nil {
			b.Fatalf("an agent process answered %q to %s: %v", answer, what, err)
		}
		sum += n
	}
	return sum
}

// lastAgentBack is the story of the agent whose session was established last, among
// the agent processes' (their "last" answers, each starting with that moment), or ""
// when the agents keep no stories (BC_LOAD_STORIES unset).
func lastAgentBack(children []*child) string {
	if os.Getenv("BC_LOAD_STORIES") == "" {
		return ""
	}
	var last string
	for _, c := range children {
		if answer := c.ask("last"); answer > last { // fixed-width UTC times order as strings
			last = answer
		}
	}
	return last
}

// storyLen is how many log records an agent's story keeps.
const storyLen = 12

// story is a slog handler keeping an agent's last log records, and when its last
// session was established.
type story struct {
	node        string
	mu          sync.Mutex
	records     []string
	established time.Time
}

func (s *story) Enabled(context.Context, slog.Level) bool { return true }
func (s *story) WithAttrs([]slog.Attr) slog.Handler       { return s }
func (s *story) WithGroup(string) slog.Handler            { return s }

func (s *story) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Time.UTC().Format("15:04:05.000"), r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, strings.ReplaceAll(b.String(), "\n", " ")) // the answer is one line
	if len(s.records) > storyLen {
		s.records = s.records[1:]
	}
	if r.Message == "registry session established" {
		s.established = r.Time
	}
	return nil
}

// told is the story as one line: when its last session was established, the node, its
// records.
func (s *story) told() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.established.UTC().Format("2006-01-02T15:04:05.000000000Z") + " " + s.node + ": " + strings.Join(s.records, " | ")
}

// bySecond writes counts, one a second, as "second:count" for the seconds that counted
// any.
func bySecond(counts []int64) string {
	var parts []string
	for sec, n := range counts {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d:%d", sec, n))
		}
	}
	return strings.Join(parts, " ")
}

// quantiles records when the share of n sessions that are connected (or of n agents that
// acknowledged a push) first reached half, 90%, 99% and all of them.
type quantiles struct {
	n    int
	at   [4]time.Duration
	seen int
}

var quantileShares = [4]float64{0.5, 0.9, 0.99, 1}

// observe records sessions connected now, since start, and reports whether all are.
func (q *quantiles) observe(sessions int, start time.Time) bool {
	for q.seen < len(q.at) && float64(sessions) >= quantileShares[q.seen]*float64(q.n) {
		q.at[q.seen] = time.Since(start)
		q.seen++
	}
	return q.seen == len(q.at)
}

func (q *quantiles) String() string {
	var parts []string
	for i, share := range quantileShares {
		parts = append(parts, fmt.Sprintf("%g%% in %.2fs", share*100, q.at[i].Seconds()))
	}
	return strings.Join(parts, ", ")
}

// profileCPU profiles the registry's CPU into BC_LOAD_PROFILE/name, if set, and the
// first agent process's into agents-name, until the returned stop.
func profileCPU(b *testing.B, name string, agents *child) (stop func()) {
	return profileCPUs(b, name, agents, "agents-"+name)
}

// profileCPUs profiles this process's CPU into BC_LOAD_PROFILE/name, if set, and the
// child c's (one that answers profileRequests) into childName, until the returned stop.
// Each process also writes its allocations so far at the start and at the stop
// (name.allocs0 and name.allocs1, see writeAllocs): the allocations of the span are
// the second with the first as its base.
func profileCPUs(b *testing.B, name string, c *child, childName string) (stop func()) {
	dir := os.Getenv("BC_LOAD_PROFILE")
	if dir == "" {
		return func() {}
	}
	file := filepath.Join(dir, name)
	if err := writeAllocs(file + ".allocs0"); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	pprof.StartCPUProfile(f)
	stopSelf := func() {
		pprof.StopCPUProfile()
		f.Close()
		if err := writeAllocs(file + ".allocs1"); err != nil {
			b.Fatal(err)
		}
	}
	if c == nil {
		return stopSelf
	}
	if got := c.ask("profile %s", filepath.Join(dir, childName)); got != "" {
		b.Fatalf("%s: %s", c.what, got)
	}
	return func() {
		stopSelf()
		if got := c.ask("stop"); got != "" {
			b.Fatalf("%s: %s", c.what, got)
		}
	}
}

// writeAllocs writes the process's allocation profile, every allocation since it started,
// into file, after a collection so that it counts every allocation up to now.
func writeAllocs(file string) error {
	runtime.GC()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// profiling is the file a child profiles its CPU into, "" when it does not.
var profiling string

// profileRequests answers a child's requests to profile its CPU into a file ("profile
// FILE") and to stop ("stop"), and reports whether req was one of them. The child's
// allocations are written at both (FILE.allocs0, FILE.allocs1) as profileCPUs writes
// its own.
func profileRequests(req []string) (answer string, ok bool) {
	switch {
	case len(req) == 2 && req[0] == "profile":
		if err := writeAllocs(req[1] + ".allocs0"); err != nil {
			return err.Error(), true
		}
		f, err := os.Create(req[1])
		if err != nil {
			return err.Error(), true
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err.Error(), true
		}
		profiling = req[1]
		return "", true
	case len(req) == 1 && req[0] == "stop":
		pprof.StopCPUProfile()
		if profiling == "" {
			return "", true
		}
		file := profiling
		profiling = ""
		if err := writeAllocs(file + ".allocs1"); err != nil {
			return err.Error(), true
		}
		return "", true
	}
	return "", false
}

// phase is one measured phase: its wall time, this process's CPU time (the registry's,
// or a peer's listener) and the child processes' (the agents', or a peer's dialler), and
// what this process allocated and how many garbage collections it ran (the collector's
// work grows with the bytes allocated).
type phase struct {
	children           []*child
	ends               [2]string // what this process and the children are, for print
	start              time.Time
	startCPU, startAgt time.Duration
	wall, cpu, agents  time.Duration
	startHeap, heap    heapCounts
	// peakRSS is the most this process held during the phase, 0 where /proc does not
	// say.
	peakRSS int64
}

func startPhase(children []*child) *phase {
	testkit.ResetPeakRSS(os.Getpid())
	return &phase{children: children, ends: [2]string{"registry", "agents'"}, start: time.Now(), startCPU: cpuTime(syscall.RUSAGE_SELF), startAgt: processesCPU(children), startHeap: readHeapCounts()}
}

func (p *phase) end() {
	p.wall, p.cpu = time.Since(p.start), cpuTime(syscall.RUSAGE_SELF)-p.startCPU
	p.agents = processesCPU(p.children) - p.startAgt
	p.heap = readHeapCounts().minus(p.startHeap)
	p.peakRSS, _ = testkit.PeakRSS(os.Getpid())
}

// print shows the phase's time and rate, this process's CPU per session with the rate
// one core would sustain at that cost, the children's CPU per session, and this
// process's bytes allocated per session and its collections.
func (p *phase) print(name string, n int, what string) {
	perSession := p.cpu.Seconds() / float64(n)
	fmt.Printf("  %-8s %7.2fs %7.0f/s  %s CPU %.3f ms per session (%.0f/s per core, %.1f KiB allocated, %d GCs), %s %.3f ms  %s\n",
		name, p.wall.Seconds(), float64(n)/p.wall.Seconds(), p.ends[0], perSession*1000, 1/perSession, float64(p.heap.allocated)/1024/float64(n), p.heap.cycles,
		p.ends[1], p.agents.Seconds()*1000/float64(n), what)
}

// heapCounts are this process's bytes allocated and garbage collections completed since
// it started.
type heapCounts struct{ allocated, cycles uint64 }

func readHeapCounts() heapCounts {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return heapCounts{s[0].Value.Uint64(), s[1].Value.Uint64()}
}

func (h heapCounts) minus(o heapCounts) heapCounts {
	return heapCounts{h.allocated - o.allocated, h.cycles - o.cycles}
}

// processesCPU is the user and system CPU time the child processes have used: a running
// one's from /proc, an ended one's (stopped or killed) as its wait reported it.
func processesCPU(children []*child) time.Duration {
	var total time.Duration
	for _, c := range children {
		if c.exited() {
			total += c.cmd.ProcessState.UserTime() + c.cmd.ProcessState.SystemTime()
			continue
		}
		total += pidsCPU(c.cmd.Process.Pid)
	}
	return total
}

// pidsCPU is the user and system CPU time the running processes pids have used
// (testkit.CPUOf); a process that ended counts nothing.
func pidsCPU(pids ...int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		if d, err := testkit.CPUOf(pid); err == nil {
			total += d
		}
	}
	return total
}

// cpuTime is the user and system CPU time of this process or of its ended children.
func cpuTime(who int) time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// barePeer holds count idle quic-go connections with the default configuration on a
// bare listener, dialled from one child process, and returns their memory per connection.
func barePeer(b *testing.B, dir string, count int) perSession {
	ln, err := quic.ListenAddr("127.0.0.1:0", bareTLS(b, dir), nil)
	if err != nil {
		b.Fatal(err)
	}
	live := acceptCounted(ln, 1, nil)
	before := sampleMemory()
	c := startChild(b, "bare", "BC_DIR="+dir, "BC_ADDR="+ln.Addr().String(), "BC_COUNT="+strconv.Itoa(count))
	waitLong(b, "bare connections", func() bool { return live.Load() == int64(count) })
	time.Sleep(time.Second) // let the handshakes' last packets settle
	after := sampleMemory()
	c.stop()
	ln.Close()
	waitLong(b, "bare connections to close", func() bool { return live.Load() == 0 })
	return after.minus(before).per(count)
}

// acceptCounted accepts ln's connections in n goroutines, each handed to accepted (when
// not nil), until ln closes, and returns the count of those still open.
func acceptCounted(ln *quic.Listener, n int, accepted func(*quic.Conn)) *atomic.Int64 {
	var live atomic.Int64
	for range n {
		go func() {
			for {
				c, err := ln.Accept(context.Background())
				if err != nil {
					return
				}
				live.Add(1)
				context.AfterFunc(c.Context(), func() { live.Add(-1) })
				if accepted != nil {
					accepted(c)
				}
			}
		}()
	}
	return &live
}

// peerCA reads the test CA of dir and returns it with a server certificate it issued,
// for the peers standing in for the endpoint.
func peerCA(b testing.TB, dir string) (*testkit.CA, tls.Certificate) {
	ca, cert, err := readServer(dir)
	if err != nil {
		b.Fatal(err)
	}
	return ca, cert
}

// bareTLS is the bare peer's server TLS: the test server certificate, any ALPN "bare".
func bareTLS(b testing.TB, dir string) *tls.Config {
	_, cert := peerCA(b, dir)
	return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"bare"}}
}

// acceptors are the reconnect peer's goroutines accepting connections, as many as the
// endpoint's: with one, quic-go's queue of 32 connections to accept filled, and it
// refused the connections past it after their handshakes. With four it still did, once:
// the dialler dials again a connection that the listener does not confirm.
const acceptors = 4

// confirmAccepted tells the reconnect peer's dialler that the listener accepted c: it
// opens a unidirectional stream and writes one byte on it.
func confirmAccepted(c *quic.Conn) {
	if s, err := c.OpenUniStream(); err == nil {
		s.Write([]byte{1})
		s.Close()
	}
}

// dialConfirmed dials until the listener confirms the connection (confirmAccepted), at
// most dialTries times, and returns it with the tries it took: quic-go refuses a
// connection after its handshake while the listener's queue of connections to accept is
// full, and on a loaded machine a handshake can fail (its packets dropped for a full
// receive buffer until its idle timeout). A failed try once ended the benchmark.
func dialConfirmed(tr *quic.Transport, addr net.Addr, conf *tls.Config) (*quic.Conn, int, error) {
	var errs []error
	for try := 1; try <= dialTries; try++ {
		c, err := tr.Dial(context.Background(), addr, conf, &quic.Config{DisablePathMTUDiscovery: true})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = c.AcceptUniStream(ctx)
			cancel()
			if err == nil {
				return c, try, nil
			}
			c.CloseWithError(0, "")
		}
		errs = append(errs, fmt.Errorf("try %d: %w", try, err))
	}
	return nil, dialTries, fmt.Errorf("the listener did not accept the connection in %d tries: %w", dialTries, errors.Join(errs...))
}

const dialTries = 5

// maxInFlight bounds the reconnect peer's handshakes in flight, as the endpoint's
// admission places bound the registry's.
const maxInFlight = 128

// The reconnect peer's bursts: its figure is the median of peerBursts clean ones, each
// 0.7-1.0 s of 2,000 reconnects on two cores, whose rate moved by a fifth between runs
// minutes apart, more than the return's goals are missed by (benchmarks.md, "The
// reconnect peer's median of three"); a burst in which a dial was tried again is
// measured again, within peerRounds bursts in all.
const (
	peerBursts = 3
	peerRounds = 6
)

// resumePeer measures the reconnect peer: count bare quic-go connections with the
// agent plane's TLS, dialled from one child process (full handshakes, not measured), then
// closed and, once the listener has seen them go, dialled again: a burst is the
// dialling again, until the listener has every connection back, and the peer's phase is
// the median burst by its time (peerBursts of them). A phase's CPU is this process's and
// the child's, as the restart's is the registry's and the agents'. A burst in which a
// dial was tried again (more handshakes resumed than connections) waited out that
// dial's try, up to 10 s: its rate is not the peer's (one such gave 173 a second where
// the others gave 1,061-1,306), so it is not counted and another is measured, up to
// peerRounds in all, then the bursts measured are kept whatever they were. rates are
// the bursts' rates, fastest first.
func resumePeer(b *testing.B, dir string, count int) (median *phase, rates string) {
	// The peer's connection ids are as long as the endpoint's: the same packets.
	tr, err := loopbackTransport()
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Conn.Close()
	defer tr.Close()
	ln, err := tr.Listen(resumeServerTLS(peerCA(b, dir)), &quic.Config{DisablePathMTUDiscovery: true})
	if err != nil {
		b.Fatal(err)
	}
	var resumed atomic.Int64
	live := acceptCounted(ln, acceptors, func(c *quic.Conn) {
		if c.ConnectionState().TLS.DidResume {
			resumed.Add(1)
		}
		go confirmAccepted(c)
	})
	c := startChild(b, "resume", "BC_DIR="+dir, "BC_ADDR="+ln.Addr().String(), "BC_COUNT="+strconv.Itoa(count))
	waitLong(b, "the peer's first connections", func() bool { return live.Load() == int64(count) })
	var clean, retried []*phase
	for round := 1; len(clean) < peerBursts && round <= peerRounds; round++ {
		if got := c.ask("close"); got != "" {
			b.Fatalf("reconnect peer: %s", got)
		}
		waitLong(b, "the peer's connections to close", func() bool { return live.Load() == 0 })
		resumed.Store(0)
		stopProfile := profileCPUs(b, "peer.pprof", c, "dialler-peer.pprof")
		p := startPhase([]*child{c})
		p.ends = [2]string{"listener", "dialler's"}
		if got := c.ask("dial"); got != "" {
			b.Fatalf("reconnect peer: %s", got)
		}
		waitLong(b, "the peer's connections back", func() bool { return live.Load() == int64(count) })
		p.end()
		stopProfile()
		// A dial the dialler gave up on (dialTries) may still have been accepted, so a
		// try again can add a resumed handshake: more than count is a try again, fewer
		// is a failure.
		switch got := resumed.Load(); {
		case got < int64(count):
			b.Fatalf("reconnect peer: %d of %d handshakes resumed", got, count)
		case got == int64(count):
			clean = append(clean, p)
		default:
			retried = append(retried, p)
			b.Logf("reconnect peer, burst %d: %d handshakes resumed for %d connections, a dial tried again after its wait (%.0f a second): not counted", round, got, count, float64(count)/p.wall.Seconds())
		}
	}
	c.stop()
	tr.Close() // the listener and its connections
	waitLong(b, "the peer's connections to close", func() bool { return live.Load() == 0 })
	bursts := clean
	if len(bursts) == 0 {
		b.Logf("reconnect peer: a dial tried again in each of %d bursts: kept all the same", peerRounds)
		bursts = retried
	}
	slices.SortFunc(bursts, func(x, y *phase) int { return cmp.Compare(x.wall, y.wall) })
	each := make([]string, len(bursts))
	for i, p := range bursts {
		each[i] = fmt.Sprintf("%.0f", float64(count)/p.wall.Seconds())
	}
	return bursts[len(bursts)/2], strings.Join(each, ", ")
}

// runResumeChild is the reconnect peer's client: BC_COUNT connections to BC_ADDR over
// one shared UDP socket, each with its own client session cache, dialled maxInFlight at
// a time. It answers "close" by closing them all once each has its session ticket, and
// "dial" by dialling them all again; until stdin closes, when it closes them (the
// listener sees them end at once rather than after its idle timeout).
func runResumeChild() int {
	ca, err := readCA(os.Getenv("BC_DIR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tr, addr, err := childPeer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer tr.Close()
	conns := make([]*quic.Conn, envInt("BC_COUNT", 1))
	confs := make([]*tls.Config, len(conns))
	tickets := make([]*ticketWait, len(conns))
	for i := range confs {
		// A certificate of its own, as every agent has: a resumption parses the client
		// certificate its ticket carries, and crypto/tls parses a certificate once for
		// all the connections that hold it (with one for all, the listener parsed none).
		cert, err := ca.AgentCertificate(nodeName(i), string(proto.RoleNode))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		tickets[i] = newTicketWait()
		confs[i] = resumeClientTLS(ca, cert, tickets[i])
	}
	dialAll := func() string {
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		var again atomic.Int64
		places := make(chan struct{}, maxInFlight)
		for i := range conns {
			places <- struct{}{}
			wg.Go(func() {
				defer func() { <-places }()
				c, tries, err := dialConfirmed(tr, addr, confs[i])
				again.Add(int64(tries - 1))
				if err != nil {
					failed.Store(&err)
					return
				}
				conns[i] = c
			})
		}
		wg.Wait()
		if n := again.Load(); n > 0 {
			fmt.Fprintf(os.Stderr, "reconnect peer: %d dials tried again (refused after the handshake, or the handshake failed)\n", n)
		}
		if err := failed.Load(); err != nil {
			return (*err).Error()
		}
		return ""
	}
	if err := dialAll(); err != "" {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	requests(func(req []string) string {
		if answer, ok := profileRequests(req); ok {
			return answer
		}
		switch {
		case len(req) == 1 && req[0] == "close":
			for i, c := range conns {
				<-tickets[i].got
				c.CloseWithError(0, "")
			}
		case len(req) == 1 && req[0] == "dial":
			return dialAll()
		}
		return ""
	})
	for _, c := range conns {
		if c != nil {
			c.CloseWithError(0, "")
		}
	}
	return 0
}

// resumeServerTLS is the reconnect peer listener's TLS: the agent plane's (TLS 1.3,
// client certificates, X25519) with the test server certificate cert of ca.
func resumeServerTLS(ca *testkit.CA, cert tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        ca.Pool(),
		NextProtos:       []string{"bare"},
		CurvePreferences: []tls.CurveID{tls.X25519},
	}
}

// resumeClientTLS is the reconnect peer dialler's TLS for one connection: the agent
// certificate cert, the CA ca, and the connection's own session cache.
func resumeClientTLS(ca *testkit.CA, cert tls.Certificate, cache *ticketWait) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{cert},
		RootCAs:            ca.Pool(),
		ServerName:         "localhost",
		NextProtos:         []string{"bare"},
		CurvePreferences:   []tls.CurveID{tls.X25519},
		ClientSessionCache: cache,
	}
}

// ticketWait is a client session cache that says when its first ticket came, and keeps
// its ticket when crypto/tls drops it (Put of nil) after a resuming handshake that
// failed: the listener's ticket keys do not change, so a dial tried again resumes.
type ticketWait struct {
	tls.ClientSessionCache
	once sync.Once
	got  chan struct{}
}

func newTicketWait() *ticketWait {
	return &ticketWait{ClientSessionCache: tls.NewLRUClientSessionCache(1), got: make(chan struct{})}
}

func (t *ticketWait) Put(key string, cs *tls.ClientSessionState) {
	if cs == nil {
		return
	}
	t.ClientSessionCache.Put(key, cs)
	t.once.Do(func() { close(t.got) })
}

// memory is what the process holds: heap in use, goroutine stacks, RSS, goroutines.
type memory struct {
	alloc, heap, stack, rss, goroutines float64
}

// perSession is memory divided by a number of sessions.
type perSession = memory

// sampleMemory measures the process at rest: after enough collections for goroutine
// stacks to shrink to what they use, and with freed memory handed back to the system,
// as the runtime's scavenger does on its own within minutes.
func sampleMemory() memory {
	for range 6 {
		runtime.GC()
	}
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, _ := testkit.RSS(os.Getpid())
	return memory{alloc: float64(ms.HeapAlloc), heap: float64(ms.HeapInuse), stack: float64(ms.StackInuse), rss: float64(rss), goroutines: float64(runtime.NumGoroutine())}
}

// describe writes m's figures as the benchmark prints them.
func (m memory) describe() string {
	return fmt.Sprintf("live heap %s, heap in use %s, stacks %s, in use+stacks %s, RSS %s, %.1f goroutines", kib(m.alloc), kib(m.heap), kib(m.stack), kib(m.heap+m.stack), kib(m.rss), m.goroutines)
}

func (m memory) minus(o memory) memory {
	return memory{m.alloc - o.alloc, m.heap - o.heap, m.stack - o.stack, m.rss - o.rss, m.goroutines - o.goroutines}
}

func (m memory) per(n int) perSession {
	f := float64(n)
	return perSession{m.alloc / f, m.heap / f, m.stack / f, m.rss / f, m.goroutines / f}
}

// udpReceiveDrops is the host's count of UDP datagrams dropped for want of room in a
// socket's receive buffer (RcvbufErrors in /proc/net/snmp).
func udpReceiveDrops() int {
	snmp, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0
	}
	var names []string
	for _, line := range strings.Split(string(snmp), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		for i, name := range names {
			if name == "RcvbufErrors" && i < len(fields) {
				n, _ := strconv.Atoi(fields[i])
				return n
			}
		}
	}
	return 0
}

func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }

// waitLong polls cond for up to 10 minutes (waitUntil).
func waitLong(b testing.TB, what string, cond func() bool) {
	b.Helper()
	waitUntil(b, what, 10*time.Minute, 10*time.Millisecond, cond)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// envDuration is the duration in the environment variable name ("25s"), def when it is
// unset or not a positive duration.
func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// spread waits a random moment within BC_LOAD_SPREAD (none when unset), or until ctx
// ends: children that start their connections so spread them over that time, as a
// fleet's machines would, not all at once.
func spread(ctx context.Context) error {
	return clock.Sleep(ctx, clock.Real{}, rand.N(max(envDuration("BC_LOAD_SPREAD", 0), 1)))
}

// loopbackTransport is a QUIC transport on one loopback UDP socket, which all its
// connections share: a child process's, and the reconnect peer's listener's. Its
// connection ids are as long as the agent endpoint's (agents.ConnectionIDLength): with
// quic-go's default of 4 bytes, thousands of connections on one socket take each
// other's ids now and then, and the one whose id was taken hears nothing more (a
// benchmark's agent that misses its registry's close).
func loopbackTransport() (*quic.Transport, error) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	return &quic.Transport{Conn: udp, ConnectionIDLength: agents.ConnectionIDLength}, nil
}

// childPeer is a peer's child transport (loopbackTransport) and the address BC_ADDR its
// connections dial.
func childPeer() (*quic.Transport, *net.UDPAddr, error) {
	addr, err := net.ResolveUDPAddr("udp", os.Getenv("BC_ADDR"))
	if err != nil {
		return nil, nil, err
	}
	tr, err := loopbackTransport()
	return tr, addr, err
}

// runAgentsChild is a process of BC_COUNT agents, nodes BC_FIRST onwards, over one shared
// UDP socket with certificates from the CA in BC_DIR. BC_ADDR is the registry's agent
// endpoint, or its replicas' separated by commas: each agent is given all of them, its
// own (the one it joined through, as bcd's config names it first) being the next in
// turn from agent to agent. BC_KEEPALIVE, a duration, sets the agents' keep-alive period
// (the agent's default when unset), and BC_LOAD_SPREAD spreads their starts. It runs
// until stdin closes, answering "refused" with its agents' attempts refused at admission
// (session.Agent.Refused), "unanswered" with those that heard nothing
// (session.Agent.Unanswered), "last" with the story of the agent whose session was
// established last (BC_LOAD_STORIES), and the profile requests (profileRequests).
func runAgentsChild() int {
	ca, err := readCA(os.Getenv("BC_DIR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	first, count := envInt("BC_FIRST", 0), envInt("BC_COUNT", 1)
	addrs := strings.Split(os.Getenv("BC_ADDR"), ",")
	tr, err := loopbackTransport()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	agents := make([]*session.Agent, 0, count)
	var stories []*story
	keepStories := os.Getenv("BC_LOAD_STORIES") != ""
	for i := first; i < first+count; i++ {
		cert, err := ca.AgentCertificate(nodeName(i), string(proto.RoleNode))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		log := slog.New(slog.DiscardHandler)
		if keepStories {
			stories = append(stories, &story{node: nodeName(i)})
			log = slog.New(stories[len(stories)-1])
		}
		a, err := session.New(session.Config{Addr: addrs[i%len(addrs)], Addrs: addrs, KeepAlive: envDuration("BC_KEEPALIVE", 0), Certificate: cert, ServerCAs: ca.Pool(), Transport: tr, Log: log})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		agents = append(agents, a)
		wg.Go(func() {
			if spread(ctx) == nil {
				a.Run(ctx)
			}
		})
	}
	counts := map[string]func(*session.Agent) int64{"refused": (*session.Agent).Refused, "unanswered": (*session.Agent).Unanswered}
	fmt.Println("ready")
	requests(func(req []string) string {
		what := strings.Join(req, " ")
		if what == "last" {
			var last string
			for _, s := range stories {
				last = max(last, s.told())
			}
			return last
		}
		if count, ok := counts[what]; ok { // all agents' attempts
			var n int64
			for _, a := range agents {
				n += count(a)
			}
			return strconv.FormatInt(n, 10)
		}
		answer, _ := profileRequests(req)
		return answer
	})
	return 0
}

// runBareChild keeps BC_COUNT bare quic-go connections with the default configuration
// to BC_ADDR over one shared UDP socket, dialling at most maxInFlight at a time and again
// any that closes, until stdin closes: then it closes them, so that the listener sees
// them end at once rather than after its idle timeout. With BC_PEER_KEEPALIVE, each
// sends quic-go's own keep-alive that often (peerKeepAlive).
func runBareChild() int {
	tr, addr, err := childPeer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // before tr.Close: each connection's close is sent
	conf := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"bare"}}
	var quicConf *quic.Config
	if keepAlive := envDuration("BC_PEER_KEEPALIVE", 0); keepAlive > 0 {
		quicConf = peerKeepAlive(keepAlive)
	}
	places := make(chan struct{}, maxInFlight) // a herd of full handshakes would time out
	for range envInt("BC_COUNT", 1) {
		wg.Go(func() {
			if spread(ctx) != nil {
				return
			}
			for ctx.Err() == nil {
				places <- struct{}{}
				conn, err := tr.Dial(ctx, addr, conf, quicConf)
				<-places
				if err != nil {
					time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
					continue
				}
				select {
				case <-conn.Context().Done():
				case <-ctx.Done():
					conn.CloseWithError(0, "")
				}
			}
		})
	}
	fmt.Println("ready")
	requests(func([]string) string { return "" })
	return 0
}

// remeasured tells how many times the registry found a session's RTT estimate stale at a
// ping and probed its path, and the probes it sent (agents.Paths.Remeasured).
func remeasured(p agents.Paths) string {
	return fmt.Sprintf("%d stale estimates re-measured with %d probes", p.Remeasured, p.Probes)
}
