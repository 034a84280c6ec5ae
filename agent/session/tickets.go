package session

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"

	"github.com/quic-go/quic-go"
)

// keepTicketFailures is how many failed handshakes in a row an agent keeps its session
// ticket through before it gives it up.
const keepTicketFailures = 5

// ticketCache is the agent's TLS session cache: one ticket, kept through failed
// handshakes. crypto/tls forgets a ticket whenever a handshake that offered it fails,
// for any reason; in a reconnect storm most failures are the registry refusing or
// timing out attempts, and an agent that then forgot its ticket would come back with a
// full handshake, several times the work on both sides, which makes the storm worse. A
// ticket the registry can no longer read costs nothing (the registry ignores it and
// does a full handshake); one that makes handshakes fail is given up after
// keepTicketFailures failures in a row. Attempts the registry refused at admission or
// never answered do not count (notTheTicket): in a return past what the registry
// handles, an agent may be refused many times in a row.
//
// The one ticket is offered at every endpoint of the registry, whatever its name (the
// cache key): the replicas of one registry share their session ticket key, so one
// resumes the session another issued, and crypto/tls offers a ticket only to a server
// whose name the certificate of the ticket's session holds.
type ticketCache struct {
	mu       sync.Mutex
	ticket   *tls.ClientSessionState
	failures int
}

// Get returns the ticket kept.
func (c *ticketCache) Get(string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ticket, c.ticket != nil
}

// Put keeps a new ticket, or counts a request to forget the ticket (crypto/tls's way of
// saying a handshake failed or the ticket expired) and forgets it after
// keepTicketFailures of them in a row.
func (c *ticketCache) Put(_ string, ticket *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ticket != nil {
		c.ticket, c.failures = ticket, 0
		return
	}
	if c.failures++; c.failures >= keepTicketFailures {
		c.ticket, c.failures = nil, 0
	}
}

// notTheTicket takes back the failure crypto/tls counted for an attempt that failed for
// a reason the ticket has no part in (refusedOrUnanswered): a refusing registry must not
// cost a returning agent its ticket, however often it refuses.
func (c *ticketCache) notTheTicket() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = max(c.failures-1, 0)
}

// refusedOrUnanswered reports whether a dial failed before the registry looked at the
// agent's ticket: refused at admission (the registry's first-packet refusal, too many
// handshakes in flight) or never answered (the handshake timed out, the dial was
// cancelled). A TLS alert or any other answer of the registry is not.
func refusedOrUnanswered(err error) bool {
	if _, ok := errors.AsType[*quic.TransportError](err); ok {
		return refusedAtAdmission(err)
	}
	return timedOut(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// timedOut reports whether a dial failed for hearing nothing from the registry within
// its handshake's timeout.
func timedOut(err error) bool {
	_, idle := errors.AsType[*quic.IdleTimeoutError](err)
	_, handshake := errors.AsType[*quic.HandshakeTimeoutError](err)
	return idle || handshake
}

// refusedAtAdmission reports whether a dial failed for the registry's refusal at its
// first packet (CONNECTION_REFUSED: too many handshakes in flight).
func refusedAtAdmission(err error) bool {
	te, ok := errors.AsType[*quic.TransportError](err)
	return ok && te.Remote && te.ErrorCode == quic.ConnectionRefused
}

// forget drops the ticket kept: the next handshake is a full one, which presents the
// agent's current certificate.
func (c *ticketCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ticket, c.failures = nil, 0
}
