package agentplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/quic-go/quic-go"
)

// TestReconnectPeerDialsAgainAndResumes: the reconnect peer's dialler (dialConfirmed)
// tries again a dial whose handshake failed, as one can on a loaded machine, and the try
// again still resumes its TLS session: one such failure ended BenchmarkAgentSessions
// about 40 s into its run, in the reconnect peer (docs/benchmarks.md).
func TestReconnectPeerDialsAgainAndResumes(t *testing.T) {
	ca, server := newCA(t)
	conf := resumeServerTLS(ca, server)
	var hellos atomic.Int64
	conf.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if hellos.Add(1) == 2 { // the first resuming handshake
			return nil, errors.New("the handshake fails, as one can on a loaded machine")
		}
		return nil, nil
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", conf, &quic.Config{DisablePathMTUDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var resumed atomic.Int64
	acceptCounted(ln, 1, func(c *quic.Conn) {
		if c.ConnectionState().TLS.DidResume {
			resumed.Add(1)
		}
		go confirmAccepted(c)
	})
	tr, err := loopbackTransport()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	cert, err := ca.AgentCertificate("peer", string(proto.RoleNode))
	if err != nil {
		t.Fatal(err)
	}
	tickets := newTicketWait()
	client := resumeClientTLS(ca, cert, tickets)

	first, _, err := dialConfirmed(tr, ln.Addr(), client)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tickets.got:
	case <-time.After(time.Minute): // a guard against hanging, not a measure
		t.Fatal("no session ticket came")
	}
	first.CloseWithError(0, "")

	again, tries, err := dialConfirmed(tr, ln.Addr(), client)
	if err != nil {
		t.Fatalf("a dial whose handshake failed was not tried again: %v", err)
	}
	defer again.CloseWithError(0, "")
	if tries != 2 || hellos.Load() != 3 {
		t.Errorf("dialled in %d tries, %d handshakes; want 2 tries, 3 handshakes", tries, hellos.Load())
	}
	if !again.ConnectionState().TLS.DidResume || resumed.Load() != 1 {
		t.Errorf("the dial tried again did not resume its session (resumed on the client: %v, by the listener: %d)", again.ConnectionState().TLS.DidResume, resumed.Load())
	}
}

// TestPeersCloseTheirConnectionsWhenStopped: the diallers of the benchmark's peers (the
// idle peer's and the reconnect peer's) close their connections when they are stopped,
// so that the listener sees each end by the dialler's close, not by its idle timeout: a
// run of BenchmarkAgentSessions waited out that timeout (30 s) twice, once for each peer.
func TestPeersCloseTheirConnectionsWhenStopped(t *testing.T) {
	dir := t.TempDir()
	ca, server := newCA(t)
	writeCA(t, ca, dir)
	for _, tc := range []struct {
		kind string
		conf *tls.Config
	}{
		{"bare", bareTLS(t, dir)},
		{"resume", resumeServerTLS(ca, server)},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			// A connection its dialler does not close ends by the idle timeout (quic-go's
			// 30 s): how each ended tells the two apart.
			ln, err := quic.ListenAddr("127.0.0.1:0", tc.conf, &quic.Config{DisablePathMTUDiscovery: true})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			const count = 3
			ends := make(chan error, count)
			live := acceptCounted(ln, 1, func(c *quic.Conn) {
				go confirmAccepted(c) // the reconnect peer's dialler waits for it
				context.AfterFunc(c.Context(), func() { ends <- context.Cause(c.Context()) })
			})
			dialler := startChild(t, tc.kind, "BC_DIR="+dir, "BC_ADDR="+ln.Addr().String(), "BC_COUNT="+strconv.Itoa(count))
			waitFor(t, "the peer's connections", func() bool { return live.Load() == count })
			dialler.stop()
			for range count {
				select {
				case err := <-ends:
					var closed *quic.ApplicationError
					if !errors.As(err, &closed) || !closed.Remote {
						t.Errorf("a connection ended by %v, not by its dialler's close", err)
					}
				case <-time.After(time.Minute): // a guard against hanging, not a measure
					t.Fatalf("%d of %d connections still open a minute after their dialler stopped", live.Load(), count)
				}
			}
		})
	}
}

// TestReconnectPeerHoldsACertificateEach: each of the reconnect peer's connections
// presents a client certificate of its own, as each agent does. crypto/tls parses a
// certificate once for all the connections that hold it: with one certificate for all,
// the peer's listener skipped the parse of a resumption's certificate that the registry
// does for every agent (7-8% of the registry's CPU in a return).
func TestReconnectPeerHoldsACertificateEach(t *testing.T) {
	dir, ln := resumeListener(t)
	const count = 3
	var mu sync.Mutex
	certs := map[string]bool{}
	live := acceptCounted(ln, 1, func(c *quic.Conn) {
		mu.Lock()
		certs[string(c.ConnectionState().TLS.PeerCertificates[0].Raw)] = true
		mu.Unlock()
		go confirmAccepted(c)
	})
	dialler := startChild(t, "resume", "BC_DIR="+dir, "BC_ADDR="+ln.Addr().String(), "BC_COUNT="+strconv.Itoa(count))
	waitFor(t, "the peer's connections", func() bool { return live.Load() == count })
	dialler.stop()
	mu.Lock()
	defer mu.Unlock()
	if len(certs) != count {
		t.Errorf("the peer's %d connections presented %d certificates; want one each", count, len(certs))
	}
}

// TestReconnectPeerDiallerProfiles: the reconnect peer's dialler writes its CPU profile
// when asked, as an agent process does, and its allocations at the start and at the
// stop, so that a run with BC_LOAD_PROFILE has the dialler's profiles
// (dialler-peer.pprof and its .allocs0 and .allocs1) to set against the agents' of a
// return.
func TestReconnectPeerDiallerProfiles(t *testing.T) {
	dir, ln := resumeListener(t)
	live := acceptCounted(ln, 1, func(c *quic.Conn) { go confirmAccepted(c) })
	dialler := startChild(t, "resume", "BC_DIR="+dir, "BC_ADDR="+ln.Addr().String(), "BC_COUNT=2")
	defer dialler.stop()
	waitFor(t, "the peer's connections", func() bool { return live.Load() == 2 })
	file := filepath.Join(dir, "dialler.pprof")
	if got := dialler.ask("profile %s", file); got != "" {
		t.Fatalf("profile: %s", got)
	}
	if got := dialler.ask("stop"); got != "" {
		t.Fatalf("stop: %s", got)
	}
	for _, f := range []string{file, file + ".allocs0", file + ".allocs1"} {
		profile, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("the dialler wrote no profile when asked: %v", err)
		}
		if !bytes.HasPrefix(profile, []byte{0x1f, 0x8b}) { // a profile is gzipped
			t.Errorf("the dialler's profile %s is not a gzipped profile: %d bytes starting %q", filepath.Base(f), len(profile), profile[:min(len(profile), 8)])
		}
	}
}

// resumeListener writes a test CA into a directory for the reconnect peer's dialler
// (BC_DIR) and starts the peer's listener with a server certificate of that CA; the
// listener closes when the test ends.
func resumeListener(t *testing.T) (dir string, ln *quic.Listener) {
	dir = t.TempDir()
	ca, server := newCA(t)
	writeCA(t, ca, dir)
	ln, err := quic.ListenAddr("127.0.0.1:0", resumeServerTLS(ca, server), &quic.Config{DisablePathMTUDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return dir, ln
}
