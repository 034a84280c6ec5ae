package session

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// TestRefusalsKeepTheTicket: an agent refused at admission many more times in a row
// than it keeps its ticket through other failures (keepTicketFailures) still resumes its
// TLS session once the registry takes it: a refusal says nothing of the ticket, and a
// full handshake would cost a registry already past what it handles several times the
// work. The registry here is a bare QUIC listener refusing first packets, as the agent
// endpoint's admission does.
func TestRefusalsKeepTheTicket(t *testing.T) {
	const refusals = 4 * keepTicketFailures
	var refuse, refused atomic.Int64
	ln, _, cfg := bareRegistry(t, func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
		if refuse.Add(-1) >= 0 {
			refused.Add(1)
			return nil, errors.New("too many handshakes in flight")
		}
		return ctx, nil
	}, &quic.Config{})
	cfg.Log, cfg.Backoff = slog.New(slog.DiscardHandler), Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}
	runAgent(t, cfg)
	first := acceptWithin(t, ln)
	if first.ConnectionState().TLS.DidResume {
		t.Fatal("the first connection resumed a session")
	}
	time.Sleep(200 * time.Millisecond) // the ticket follows the handshake
	refuse.Store(refusals)
	first.CloseWithError(0, "the registry restarts")
	second := acceptWithin(t, ln)
	defer second.CloseWithError(0, "")
	if n := refused.Load(); n != refusals {
		t.Fatalf("%d attempts refused, want %d", n, refusals)
	}
	if !second.ConnectionState().TLS.DidResume {
		t.Errorf("after %d refusals in a row the agent came back with a full handshake: it gave up its ticket", refusals)
	}
}

// TestRefusedCountsAttempts: an agent counts an attempt the registry refused at
// admission once (Agent.Refused), however many copies of its first packet the registry
// refused: here the registry's admission takes 1.5 s to refuse the first, the agent
// sends it again meanwhile (its probe timeout, about 300 ms before any round trip), and
// the registry refuses each copy, as agents.Handshakes.Refused counts them.
func TestRefusedCountsAttempts(t *testing.T) {
	var copies atomic.Int64
	_, _, cfg := bareRegistry(t, func(context.Context, *quic.ClientInfo) (context.Context, error) {
		if copies.Add(1) == 1 {
			time.Sleep(1500 * time.Millisecond) // the registry's read falls behind
		}
		return nil, errors.New("too many handshakes in flight")
	}, &quic.Config{})
	cfg.Log = slog.New(slog.DiscardHandler)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := a.dial(ctx); !refusedAtAdmission(err) {
		t.Fatalf("dial: %v, want a refusal at admission", err)
	}
	// The registry takes the copies sent meanwhile once its first refusal is out, so the
	// agent may hear that refusal before the registry has read them (under the race
	// detector on a loaded machine it did): wait for them, and for what they bring.
	testkit.WaitFor(t, "a second copy of the attempt's first packet refused (the test needs the agent to send it again)", 10*time.Second, 10*time.Millisecond,
		func() bool { return copies.Load() >= 2 })
	time.Sleep(100 * time.Millisecond) // the copies' refusals reach the agent, which counted its attempt already
	if n := a.Refused(); n != 1 {
		t.Errorf("one attempt refused (%d copies of its first packet): the agent counts %d, want 1", copies.Load(), n)
	}
	if n := a.Unanswered(); n != 0 {
		t.Errorf("an attempt the registry refused counted %d unanswered, want 0", n)
	}
}

// TestUnansweredCountsTheSilentAttempts: an attempt that hears nothing within the
// handshake's timeout (a registry whose refusals were dropped, or one that is down) is
// counted unanswered (Agent.Unanswered), not refused: here the registry's address is a
// socket that reads every packet and answers none.
func TestUnansweredCountsTheSilentAttempts(t *testing.T) {
	_, _, cfg := bareRegistry(t, nil, &quic.Config{})
	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var heard atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := silent.ReadFrom(buf); err != nil {
				return
			}
			heard.Add(1)
		}
	}()
	cfg.Addr, cfg.Log = silent.LocalAddr().String(), slog.New(slog.DiscardHandler)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := a.dial(ctx); !timedOut(err) {
		t.Fatalf("dial: %v, want the handshake timed out", err)
	}
	if heard.Load() == 0 {
		t.Fatal("the silent registry heard no packet: the test needs the agent's attempt to reach it")
	}
	if u, r := a.Unanswered(), a.Refused(); u != 1 || r != 0 {
		t.Errorf("one attempt unanswered (%d packets sent): the agent counts %d unanswered and %d refused, want 1 and 0", heard.Load(), u, r)
	}
}

// TestTheHelloTellsTheAttemptsRefused: the hello of each session tells the attempts the
// registry refused at admission since the hello before it (proto.Hello.RefusedAttempts),
// 0 included, so that the registry counts attempts, not first packets: 0 at the first
// session, the refusals before the second, 0 again at the third.
func TestTheHelloTellsTheAttemptsRefused(t *testing.T) {
	const refusals = 3
	var refuse atomic.Int64
	ln, _, cfg := bareRegistry(t, func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
		if refuse.Add(-1) >= 0 {
			return nil, errors.New("too many handshakes in flight")
		}
		return ctx, nil
	}, &quic.Config{})
	cfg.Log, cfg.Backoff = slog.New(slog.DiscardHandler), Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}
	a := runAgent(t, cfg)
	hello := func() (*quic.Conn, *int64) {
		t.Helper()
		conn := acceptWithin(t, ln)
		actx, stop := context.WithTimeout(t.Context(), 30*time.Second)
		defer stop()
		stream, err := conn.AcceptStream(actx)
		if err != nil {
			t.Fatal(err)
		}
		m, err := proto.ReadMessage(stream)
		if err != nil || m.Type != proto.MsgHello {
			t.Fatalf("first message %+v, %v: want a hello", m, err)
		}
		return conn, m.Hello.RefusedAttempts
	}

	for i, want := range []int64{0, refusals, 0} {
		conn, got := hello()
		if got == nil {
			t.Fatalf("session %d: the hello tells no count of attempts refused, want %d", i+1, want)
		}
		if *got != want {
			t.Fatalf("session %d: the hello tells %d attempts refused, want %d (the agent counts %d in all)", i+1, *got, want, a.Refused())
		}
		if i == 0 {
			refuse.Store(refusals)
		}
		conn.CloseWithError(0, "the registry restarts")
	}
	if n := a.Refused(); n != refusals {
		t.Errorf("the agent counts %d attempts refused, want %d", n, refusals)
	}
}
