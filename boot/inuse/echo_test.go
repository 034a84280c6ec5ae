package inuse

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestEchoAnsweredOnLoopback: the host's own loopback answers the echoes, many at once,
// each matched to its own request; after Close, a ping gets no answer.
func TestEchoAnsweredOnLoopback(t *testing.T) {
	e, err := ListenEcho(time.Second)
	if err != nil {
		t.Skipf("no ICMP socket here (needs root or net.ipv4.ping_group_range): %v", err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		ip := netip.AddrFrom4([4]byte{127, 0, 0, byte(1 + i%4)})
		wg.Go(func() {
			if !e.Ping(ip) {
				t.Errorf("no answer from %s", ip)
			}
		})
	}
	wg.Wait()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if e.Ping(netip.MustParseAddr("127.0.0.1")) {
		t.Error("answered after Close")
	}
}
