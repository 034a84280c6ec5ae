package inuse

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// TestRawSocketTakesOnlyEchoReplies: a raw ICMP socket is given every ICMP datagram the
// host receives, the echo requests a host sends at it included (a ping flood, or the
// check's own echo to an address of the host), each taking room in its receive buffer
// that the replies need: while it is full the kernel drops the reply of a host that
// answers, and its address is found free and offered. The check's raw socket asks the
// kernel (ICMP_FILTER) for echo replies only. Before, the first datagram it read after
// an echo to the loopback was that echo's request.
func TestRawSocketTakesOnlyEchoReplies(t *testing.T) {
	s, err := openICMP(unix.SOCK_RAW)
	if err != nil {
		t.Skipf("no raw ICMP socket here (needs root or CAP_NET_RAW): %v", err)
	}
	defer s.Close()
	b, err := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 0x4243, Seq: 1, Data: payload}}).Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteTo(b, &net.IPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1500)
	var others []string
	for {
		n, from, err := s.ReadFrom(buf)
		if err != nil {
			t.Fatalf("no echo reply from the loopback: %v (read before it: %v)", err, others)
		}
		m, err := icmp.ParseMessage(1, buf[:n])
		if err != nil {
			t.Fatalf("unreadable datagram from %v: %v", from, err)
		}
		if m.Type != ipv4.ICMPTypeEchoReply {
			others = append(others, m.Type.(ipv4.ICMPType).String())
			continue
		}
		if e, ok := m.Body.(*icmp.Echo); ok && e.ID == 0x4243 {
			break
		}
	}
	if len(others) > 0 {
		t.Errorf("the raw socket was given ICMP datagrams other than echo replies, each taking room the replies need: %v", others)
	}
}
