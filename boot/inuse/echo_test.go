package inuse

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestEchoAnsweredOnLoopback: the host's own loopback answers the echoes, many at once,
// each matched to its own request; after Close, a ping gets no answer.
func TestEchoAnsweredOnLoopback(t *testing.T) {
	e, err := ListenEcho(time.Second, func(err error) { t.Errorf("the socket failed: %v", err) })
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

// brokenSocket is an ICMP socket that has failed for good: every read returns an error
// at once, as one on a socket the kernel no longer serves does. It counts the reads and
// the echoes written; a read after its first waits for Close, so that a reader that
// reads again is seen rather than left spinning.
type brokenSocket struct {
	mu            sync.Mutex
	reads, writes int
	closed        chan struct{}
}

func (s *brokenSocket) ReadFrom([]byte) (int, net.Addr, error) {
	s.mu.Lock()
	s.reads++
	again := s.reads > 1
	s.mu.Unlock()
	if again {
		<-s.closed
		return 0, nil, net.ErrClosed
	}
	return 0, nil, &net.OpError{Op: "read", Net: "ip4:icmp", Err: os.NewSyscallError("recvfrom", syscall.ENOBUFS)}
}

func (s *brokenSocket) WriteTo(b []byte, _ net.Addr) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return len(b), nil
}

func (s *brokenSocket) Close() error { close(s.closed); return nil }

func (s *brokenSocket) counts() (reads, writes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads, s.writes
}

// TestAFailedSocketStopsItsReader: the conflict check's socket fails for good (every
// read an error other than its close). The reader stops at the first error rather than
// reading again, tells it once, and the pings after get no answer without an echo sent,
// so the DHCP server offers on unchecked. Before, the reader read again at once,
// forever, on a core of the site agent's machine.
func TestAFailedSocketStopsItsReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sock := &brokenSocket{closed: make(chan struct{})}
		failures := make(chan error, 2)
		e := newEcho(sock, true, time.Second, func(err error) { failures <- err })
		synctest.Wait() // the reader read, and stopped or waits to read again
		if reads, _ := sock.counts(); reads != 1 {
			t.Errorf("the reader read %d times from a socket that failed for good: want it stopped at the first error", reads)
		}
		for _, ip := range []netip.Addr{a, b} {
			if e.Ping(ip) {
				t.Errorf("%s answered on a failed socket", ip)
			}
		}
		if _, writes := sock.counts(); writes != 0 {
			t.Errorf("%d echoes sent from a failed socket, want none", writes)
		}
		e.Close()
		if len(failures) != 1 {
			t.Fatalf("the failure told %d times, want once", len(failures))
		}
		if err := <-failures; !errors.Is(err, syscall.ENOBUFS) {
			t.Errorf("the failure told: %v, want the read's error", err)
		}
	})
}
