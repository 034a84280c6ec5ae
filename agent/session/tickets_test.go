package session

import (
	"crypto/tls"
	"testing"
)

func TestTicketCacheKeepsTicketThroughFailures(t *testing.T) {
	first, second := &tls.ClientSessionState{}, &tls.ClientSessionState{}
	var c ticketCache
	if _, ok := c.Get("registry"); ok {
		t.Fatal("an empty cache returned a ticket")
	}
	c.Put("registry", first)
	// Failed handshakes (crypto/tls puts nil) short of the limit keep the ticket.
	for i := range keepTicketFailures - 1 {
		c.Put("registry", nil)
		if got, ok := c.Get("registry"); !ok || got != first {
			t.Fatalf("after %d failures the ticket is gone", i+1)
		}
	}
	// A new ticket resets the count.
	c.Put("registry", second)
	for range keepTicketFailures - 1 {
		c.Put("registry", nil)
	}
	if got, ok := c.Get("registry"); !ok || got != second {
		t.Fatal("the new ticket did not reset the failures")
	}
	// The limit-th failure in a row gives it up.
	c.Put("registry", nil)
	if _, ok := c.Get("registry"); ok {
		t.Fatalf("the ticket survived %d failures in a row", keepTicketFailures)
	}
	// Every endpoint of the registry (its replicas) is offered the one ticket, and
	// failures at any of them count.
	c.Put("replica-1", first)
	if got, ok := c.Get("replica-2"); !ok || got != first {
		t.Fatal("another replica's endpoint is not offered the ticket")
	}
	for range keepTicketFailures {
		c.Put("replica-2", nil)
	}
	if _, ok := c.Get("replica-1"); ok {
		t.Fatal("failures at another endpoint did not count")
	}
}
