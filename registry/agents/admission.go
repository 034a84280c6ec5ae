package agents

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"
)

// maxHandshakes bounds the connections between their first packet and their acceptance
// by the endpoint. Past it, an attempt is refused at its first packet, before any
// cryptography, and the agent retries after its backoff. The bound is what two cores
// keep busy with little queueing: a reconnect storm is then served at the rate the
// registry completes handshakes. It leaves room for a returning fleet's stream of 900 a
// second (reconnectRate) when a handshake's steps wait 100 ms for the processor; at
// 64, such waits filled it and refused a part of the stream, and those agents' backoff
// made the tail of the return. With many hundreds in flight, their goroutines starved
// the goroutine that reads the UDP socket, the socket's buffer overflowed, and
// handshakes timed out with their work done.
const maxHandshakes = 128

// errBusy refuses a connection attempt while maxHandshakes are in flight.
var errBusy = errors.New("too many handshakes in flight")

// admission counts the handshakes in flight.
type admission struct{ inFlight, refused, admitted, resumed, abandoned atomic.Int64 }

type ticketKey struct{}

// ticket is one admitted connection's place, given back once.
type ticket struct {
	once sync.Once
	a    *admission
}

func (t *ticket) release() { t.once.Do(func() { t.a.inFlight.Add(-1) }) }

// abandon gives the place back of a connection that ended before the endpoint accepted
// it, and counts it.
func (t *ticket) abandon() {
	t.once.Do(func() {
		t.a.abandoned.Add(1) // first: whoever sees the place back sees it counted
		t.a.inFlight.Add(-1)
	})
}

// admit is the transport's ConnContext: it admits a new connection while fewer than
// maxHandshakes are in flight, and gives its place back when the endpoint accepts it or
// the connection ends before that.
func (a *admission) admit(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
	if a.inFlight.Add(1) > maxHandshakes {
		a.inFlight.Add(-1)
		a.refused.Add(1)
		return nil, errBusy
	}
	t := &ticket{a: a}
	context.AfterFunc(ctx, t.abandon)
	return context.WithValue(ctx, ticketKey{}, t), nil
}

// accepted gives back the place of a connection the endpoint accepted, and counts it.
func (a *admission) accepted(conn *quic.Conn) {
	a.admitted.Add(1)
	if conn.ConnectionState().TLS.DidResume {
		a.resumed.Add(1)
	}
	if t, ok := conn.Context().Value(ticketKey{}).(*ticket); ok {
		t.release()
	}
}
