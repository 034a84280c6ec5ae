package inuse

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// FuzzEchoReply: any datagram the socket receives, from any host, is matched to a
// request only when it is an echo reply of the Echo's id (on a raw socket), keyed by the
// address it came from and its sequence number; none makes the receiver fail.
func FuzzEchoReply(f *testing.F) {
	for _, m := range []icmp.Message{
		{Type: ipv4.ICMPTypeEchoReply, Body: &icmp.Echo{ID: 7, Seq: 1, Data: payload}},
		{Type: ipv4.ICMPTypeEchoReply, Body: &icmp.Echo{ID: 8, Seq: 65535}},
		{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 7, Seq: 2, Data: payload}},
		{Type: ipv4.ICMPTypeDestinationUnreachable, Code: 1, Body: &icmp.DstUnreach{Data: make([]byte, 28)}},
	} {
		b, err := m.Marshal(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
		f.Add(b, false)
	}
	f.Add([]byte{0}, true)
	from := &net.IPAddr{IP: net.IPv4(10, 99, 0, 100)}
	f.Fuzz(func(t *testing.T, b []byte, raw bool) {
		e := &Echo{id: 7}
		key, ok := e.reply(b, from, raw)
		m, err := icmp.ParseMessage(1, b)
		if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
			if ok {
				t.Fatalf("matched %x, which is no echo reply", b)
			}
			return
		}
		echo := m.Body.(*icmp.Echo)
		want := !raw || echo.ID == 7
		if ok != want || ok && (key.from != netip.MustParseAddr("10.99.0.100") || key.seq != echo.Seq) {
			t.Fatalf("reply %x (raw %v): %+v %v, want matched %v with seq %d from 10.99.0.100", b, raw, key, ok, want, echo.Seq)
		}
	})
}
