package agentplane

import (
	"crypto/tls"
	"errors"
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
	tr, err := childTransport()
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
