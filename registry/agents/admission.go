package agents

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/better-compute/better-compute/proto"
)

// The admission bound (admission.limit) is on the connections between their first
// packet and their acceptance by the endpoint. Past it, an attempt is refused at its
// first packet, before any cryptography, and the agent comes back after the stream of
// returning agents ends, or after its backoff. The bound is what the cores keep busy with
// little queueing: a reconnect storm is then served at the rate the registry completes
// handshakes. It starts at 128 (defaultAdmission: on two cores, room for a stream of 900
// a second when a handshake's steps wait 100 ms for the processor; at 64, such waits
// filled it) and follows the measured handshake time after each return (adapt), at most
// 192: with many hundreds in flight, their goroutines starved the goroutine that reads
// the UDP socket, the socket's buffer overflowed, and handshakes timed out with their
// work done.

// errBusy refuses a connection attempt while the admission bound is in flight.
var errBusy = errors.New("too many handshakes in flight")

// admission counts the handshakes in flight, up to limit, and those that ended; handshakes
// and handshakeTime (ns) sum the time from first packet to acceptance. hellos counts the
// accepted connections whose first message was read, reported the refused attempts
// their agents told in it (helloRead), and unreporting the hellos of agents of earlier
// versions, which tell none.
type admission struct {
	limit, inFlight, refused, admitted, resumed, abandoned atomic.Int64
	handshakes, handshakeTime                              atomic.Int64
	hellos, reported, unreporting                          atomic.Int64
}

// maxReported bounds the refused attempts one hello adds to the count: an agent refused
// on its return tries again at most proto.ReslotTries times after the stream's end
// before its backoff takes over, so an honest one reports a few. A node that lies adds
// no more than this, and the count a return is planned on is never more than the
// refused first packets the endpoint counted itself (measureReturn).
const maxReported = 2 * (proto.ReslotTries + 1)

type ticketKey struct{}

// ticket is one admitted connection's place, given back once.
type ticket struct {
	once sync.Once
	a    *admission
	at   time.Time
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
// limit are in flight, and gives its place back when the endpoint accepts it or
// the connection ends before that.
func (a *admission) admit(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
	if a.inFlight.Add(1) > a.limit.Load() {
		a.inFlight.Add(-1)
		a.refused.Add(1)
		return nil, errBusy
	}
	t := &ticket{a: a, at: time.Now()}
	context.AfterFunc(ctx, t.abandon)
	return context.WithValue(ctx, ticketKey{}, t), nil
}

// helloRead counts an accepted connection's first message read: h, the hello, or nil when
// what came was none.
func (a *admission) helloRead(h *proto.Hello) {
	switch {
	case h == nil:
	case h.RefusedAttempts == nil:
		a.unreporting.Add(1)
	default:
		a.reported.Add(min(*h.RefusedAttempts, maxReported))
	}
	a.hellos.Add(1) // last: whoever sees the hello counted sees its report
}

// attemptsRefused is the count of refused attempts a return is planned on, the endpoint
// having refused firstPackets first packets: the agents' own count, told in their
// hellos, but never more than firstPackets (each refused attempt had one refused at
// least), so that a node that lies adds nothing past the endpoint's count; and
// firstPackets itself once an agent of an earlier version, which counts nothing, said
// hello.
func (a *admission) attemptsRefused(firstPackets int64) int64 {
	if a.unreporting.Load() > 0 {
		return firstPackets
	}
	return min(a.reported.Load(), firstPackets)
}

// accepted gives back the place of a connection the endpoint accepted, and counts it.
func (a *admission) accepted(conn *quic.Conn) {
	a.admitted.Add(1)
	if conn.ConnectionState().TLS.DidResume {
		a.resumed.Add(1)
	}
	if t, ok := conn.Context().Value(ticketKey{}).(*ticket); ok {
		a.handshakes.Add(1)
		a.handshakeTime.Add(int64(time.Since(t.at)))
		t.release()
	}
}
