package fetchtest

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// NewResolver starts a DNS server on 127.0.0.1 that answers A and AAAA queries for the
// names of hosts with their addresses (and every other name with NXDOMAIN), and returns
// a resolver that asks it alone: what a host name resolves to for a fetch under test,
// without touching the machine's own resolver. The server stops when the test ends.
func NewResolver(t testing.TB, hosts map[string][]netip.Addr) *net.Resolver {
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if answer, ok := answerDNS(buf[:n], hosts); ok {
				conn.WriteTo(answer, from)
			}
		}
	}()
	addr := conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp4", addr)
	}}
}

// answerDNS answers one query message from hosts.
func answerDNS(query []byte, hosts map[string][]netip.Addr) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	addrs, known := hosts[strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")]
	rcode := dnsmessage.RCodeSuccess
	if !known {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: rcode})
	b.EnableCompression()
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
	for _, a := range addrs {
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
	}
	out, err := b.Finish()
	return out, err == nil
}
