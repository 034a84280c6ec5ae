package session

import (
	"crypto/tls"
	"sync"
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
// keepTicketFailures failures in a row.
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

// forget drops the ticket kept: the next handshake is a full one, which presents the
// agent's current certificate.
func (c *ticketCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ticket, c.failures = nil, 0
}
