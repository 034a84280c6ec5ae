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

	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// TestEchoAnsweredOnLoopback: the host's own loopback answers the echoes, many at once,
// each matched to its own request; after Close, a ping is ErrDown.
func TestEchoAnsweredOnLoopback(t *testing.T) {
	e, err := ListenEcho(time.Second, 64, Health{Failed: func(err error) { t.Errorf("the socket failed: %v", err) }, Back: func() {}})
	if err != nil {
		t.Skipf("no ICMP socket here (needs root or net.ipv4.ping_group_range): %v", err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		ip := netip.AddrFrom4([4]byte{127, 0, 0, byte(1 + i%4)})
		wg.Go(func() {
			if up, err := e.Ping(ip); !up || err != nil {
				t.Errorf("no answer from %s: %v", ip, err)
			}
		})
	}
	wg.Wait()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if up, err := e.Ping(netip.MustParseAddr("127.0.0.1")); up || !errors.Is(err, ErrDown) {
		t.Errorf("after Close: answered %v, %v; want ErrDown", up, err)
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

func (s *brokenSocket) room() int { return 0 }

func (s *brokenSocket) counts() (reads, writes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads, s.writes
}

// TestAFailedSocketStopsItsReader: the conflict check's socket fails for good (every
// read an error other than its close). The reader stops reading it at the first error
// rather than reading again, tells it once, and the pings after get no answer without
// an echo sent (ErrDown), so the DHCP server offers on unchecked until a socket opens again.
// Before, the reader read again at once, forever, on a core of the site agent's machine.
func TestAFailedSocketStopsItsReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sock := &brokenSocket{closed: make(chan struct{})}
		failures := make(chan error, 2)
		e, err := newEcho(opens(sock), time.Second, Health{Failed: func(err error) { failures <- err }, Back: func() { t.Error("back without a socket") }})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the reader read, and stopped or waits to read again
		if reads, _ := sock.counts(); reads != 1 {
			t.Errorf("the reader read %d times from a socket that failed for good: want it stopped at the first error", reads)
		}
		for _, ip := range []netip.Addr{a, b} {
			if up, err := e.Ping(ip); up || !errors.Is(err, ErrDown) {
				t.Errorf("%s on a failed socket: answered %v, %v; want ErrDown", ip, up, err)
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

// opens is an open function that returns each of socks in turn, then fails.
func opens(socks ...socket) func() (socket, bool, error) {
	var mu sync.Mutex
	return func() (socket, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(socks) == 0 {
			return nil, false, os.NewSyscallError("socket", syscall.EMFILE)
		}
		s := socks[0]
		socks = socks[1:]
		return s, true, nil
	}
}

// answeringSocket is a raw ICMP socket on which every host answers: each echo written
// is read back as its reply, from the address it went to.
type answeringSocket struct {
	replies chan reply
	closed  chan struct{}
	once    sync.Once
}

type reply struct {
	b    []byte
	from net.Addr
}

func newAnsweringSocket() *answeringSocket {
	return &answeringSocket{replies: make(chan reply, 16), closed: make(chan struct{})}
}

func (s *answeringSocket) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case r := <-s.replies:
		return copy(b, r.b), r.from, nil
	case <-s.closed:
		return 0, nil, net.ErrClosed
	}
}

func (s *answeringSocket) WriteTo(b []byte, to net.Addr) (int, error) {
	m, err := icmp.ParseMessage(1, b)
	if err != nil {
		return 0, err
	}
	m.Type = ipv4.ICMPTypeEchoReply
	r, err := m.Marshal(nil)
	if err != nil {
		return 0, err
	}
	s.replies <- reply{b: r, from: to}
	return len(b), nil
}

func (s *answeringSocket) Close() error { s.once.Do(func() { close(s.closed) }); return nil }

func (s *answeringSocket) room() int { return 16 }

// TestAFailedSocketIsOpenedAgain: the conflict check's socket fails, and the next one
// opens. The checks resume FirstReopen after the failure: a ping is answered again,
// and the failure and the return are each told once. Before, a failed socket was never
// opened again: the server offered every address unchecked until bcd site restarted.
func TestAFailedSocketIsOpenedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broken, good := &brokenSocket{closed: make(chan struct{})}, newAnsweringSocket()
		var failed, back int
		e, err := newEcho(opens(broken, good), time.Second, Health{Failed: func(error) { failed++ }, Back: func() { back++ }})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		synctest.Wait()
		if up, err := e.Ping(a); up || !errors.Is(err, ErrDown) {
			t.Errorf("%s on the failed socket: answered %v, %v; want ErrDown", a, up, err)
		}
		time.Sleep(FirstReopen - time.Nanosecond)
		synctest.Wait()
		if back != 0 || e.Kind() != "" {
			t.Fatalf("a socket opened again before FirstReopen (back told %d times, socket %q)", back, e.Kind())
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if failed != 1 || back != 1 {
			t.Fatalf("failed told %d times and back %d, want once each", failed, back)
		}
		for _, ip := range []netip.Addr{a, b} {
			if up, err := e.Ping(ip); !up || err != nil {
				t.Errorf("%s: no answer on the socket opened again: %v", ip, err)
			}
		}
	})
}

// TestAFailingSocketIsTriedWithBackoff: the conflict check's socket fails and will not
// come back, either because it can not be opened or because each one opened fails at
// its first read. Each attempt waits twice the one before, from FirstReopen up to
// LastReopen, so that in ten minutes it is tried some fourteen times, not in a loop;
// pings meanwhile send no echo.
func TestAFailingSocketIsTriedWithBackoff(t *testing.T) {
	for name, failing := range map[string]func() socket{
		"does not open":         nil,
		"opens and fails again": func() socket { return &brokenSocket{closed: make(chan struct{})} },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var (
					mu       sync.Mutex
					attempts []time.Duration
					socks    []*brokenSocket
				)
				open := func() (socket, bool, error) {
					mu.Lock()
					defer mu.Unlock()
					attempts = append(attempts, time.Since(start))
					if len(attempts) == 1 || failing != nil {
						s := &brokenSocket{closed: make(chan struct{})}
						socks = append(socks, s)
						return s, true, nil
					}
					return nil, false, os.NewSyscallError("socket", syscall.EMFILE)
				}
				var failed int
				e, err := newEcho(open, time.Second, Health{Failed: func(error) { failed++ }, Back: func() {}})
				if err != nil {
					t.Fatal(err)
				}
				for range 10 {
					time.Sleep(time.Minute)
					e.Ping(a)
				}
				e.Close()
				mu.Lock()
				defer mu.Unlock()
				var want []time.Duration
				for at, wait := time.Duration(0), FirstReopen; at <= 10*time.Minute; at, wait = at+wait, min(2*wait, LastReopen) {
					want = append(want, at)
				}
				if diff := cmp.Diff(want, attempts); diff != "" {
					t.Errorf("the attempts to open the socket, from the first (-want +got):\n%s", diff)
				}
				for i, s := range socks {
					if reads, writes := s.counts(); reads != 1 || writes != 0 {
						t.Errorf("socket %d: read %d times and %d echoes sent, want read once and none sent", i, reads, writes)
					}
				}
				if wantFailed := map[bool]int{true: 1, false: len(want)}[failing == nil]; failed != wantFailed {
					t.Errorf("failed told %d times, want %d: once for each socket that opened", failed, wantFailed)
				}
			})
		})
	}
}

// refusingSocket is a socket whose kernel refuses every echo, as it does while the
// echoes awaiting ARP fill the socket's send buffer; its reads wait for Close.
type refusingSocket struct{ closed chan struct{} }

func (s *refusingSocket) ReadFrom([]byte) (int, net.Addr, error) {
	<-s.closed
	return 0, nil, net.ErrClosed
}

func (s *refusingSocket) WriteTo(b []byte, to net.Addr) (int, error) {
	return 0, &net.OpError{Op: "write", Net: "ip4:icmp", Addr: to, Err: os.NewSyscallError("sendto", syscall.ENOBUFS)}
}

func (s *refusingSocket) Close() error { close(s.closed); return nil }

func (s *refusingSocket) room() int { return 0 }

// TestEchoNotSentIsNoFreeAddress: an echo the kernel refuses to send is ErrNotSent, with
// the kernel's error, not an address that did not answer: before, it was taken as no
// answer, and the address offered unchecked.
func TestEchoNotSentIsNoFreeAddress(t *testing.T) {
	e, err := newEcho(opens(&refusingSocket{closed: make(chan struct{})}), time.Second, Health{Failed: func(err error) { t.Errorf("the socket failed: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	up, err := e.Ping(a)
	if up || !errors.Is(err, ErrNotSent) || !errors.Is(err, syscall.ENOBUFS) {
		t.Errorf("ping with its echo refused: %v, %v; want ErrNotSent with ENOBUFS", up, err)
	}
}

// failingSocket is a raw ICMP socket that takes echoes and answers none, and whose read
// fails (an error other than its close) once fail is closed.
type failingSocket struct {
	fail, closed chan struct{}
	once         sync.Once
}

func (s *failingSocket) ReadFrom([]byte) (int, net.Addr, error) {
	select {
	case <-s.fail:
		return 0, nil, &net.OpError{Op: "read", Net: "ip4:icmp", Err: os.NewSyscallError("recvfrom", syscall.ENOMEM)}
	case <-s.closed:
		return 0, nil, net.ErrClosed
	}
}

func (s *failingSocket) WriteTo(b []byte, _ net.Addr) (int, error) { return len(b), nil }

func (s *failingSocket) Close() error { s.once.Do(func() { close(s.closed) }); return nil }

func (s *failingSocket) room() int { return 16 }

// TestCheckCutByAFailedSocketIsNotRemembered: the socket fails while a check's echo
// waits for its reply, so the check tells nothing of its address. The checker must not
// take the address as free: once a socket opens again, the next check of it sends an
// echo and finds the host that answers there. Before, the cut check was remembered as
// free, and the address offered unchecked for 30 s after the checks were back.
func TestCheckCutByAFailedSocketIsNotRemembered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		failing := &failingSocket{fail: make(chan struct{}), closed: make(chan struct{})}
		e, err := newEcho(opens(failing, newAnsweringSocket()), time.Second, Health{Failed: func(error) {}, Back: func() {}})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		c := NewChecker(e.Ping, realClock{}, 30*time.Second)
		cut := make(chan bool)
		go func() {
			used, err := c.InUse(a)
			if err != nil {
				t.Errorf("the check cut by the socket's failure: %v, want no error (the server offers unchecked while the socket is down)", err)
			}
			cut <- used
		}()
		synctest.Wait() // the echo is out, waiting for its reply
		close(failing.fail)
		if <-cut {
			t.Error("in use after a check the socket's failure cut, want not")
		}
		time.Sleep(FirstReopen)
		synctest.Wait()
		if e.Kind() != "raw" {
			t.Fatalf("no socket opened again after FirstReopen (kind %q)", e.Kind())
		}
		if used, err := c.InUse(a); !used || err != nil {
			t.Errorf("check of %s after the socket opened again: in use %v, %v; want in use, found by an echo, not taken as free from the check the failure cut", a, used, err)
		}
	})
}

// realClock is the time, synctest's fake one inside its bubble.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// TestEchoTheKernelRefusesIsNotSent: the kernel itself refuses the check's echo, from a
// raw and from a datagram ICMP socket, to an address where a host answers: the server's
// interface drops every datagram it is given to send (a pfifo queue of no room), and the
// neighbour of the address is known, so the echo reaches the queue at once and the drop
// is the send's result, ENOBUFS. The ping is ErrNotSent with the kernel's ENOBUFS, not an
// address that did not answer, and the checker does not remember it as free: once the
// interface sends again, the next check finds the host. Without IP_RECVERR a raw socket's
// send takes the drop for sent, and the host's address is found free.
func TestEchoTheKernelRefusesIsNotSent(t *testing.T) {
	netns.Require(t, "tc")
	const hostMAC = "02:00:00:00:0b:01"
	for name, datagram := range map[string]bool{"raw": false, "datagram": true} {
		t.Run(name, func(t *testing.T) {
			lan := netns.NewLAN(t)
			srv, host := netns.New(t, "check"), netns.New(t, "host")
			lan.Attach(t, srv, "bcs0", "10.9.0.1/24", "")
			lan.Attach(t, host, "bch0", a.String()+"/24", hostMAC)
			// ARP would go through the dropping queue too: the host's address is known.
			srv.Run(t, "ip", "neigh", "replace", a.String(), "lladdr", hostMAC, "dev", "bcs0", "nud", "permanent")
			if datagram {
				srv.Run(t, "sh", "-c", "echo '0 0' > /proc/sys/net/ipv4/ping_group_range")
			}
			var e *Echo
			if err := srv.Do(func() (err error) {
				e, err = ListenEcho(time.Second, 16, Health{Failed: func(err error) { t.Errorf("the socket failed: %v", err) }, Back: func() {}})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if kind := map[bool]string{true: "datagram", false: "raw"}[datagram]; e.Kind() != kind {
				t.Fatalf("socket %q, want %q", e.Kind(), kind)
			}
			c := NewChecker(e.Ping, realClock{}, 30*time.Second)
			if used, err := c.InUse(a); !used || err != nil {
				t.Fatalf("check of %s, where a host answers, before the drops: in use %v, %v", a, used, err)
			}
			srv.Run(t, "tc", "qdisc", "add", "dev", "bcs0", "root", "pfifo", "limit", "0")
			if up, err := e.Ping(a); up || !errors.Is(err, ErrNotSent) || !errors.Is(err, syscall.ENOBUFS) {
				t.Errorf("ping of %s with its echo dropped by the kernel: answered %v, %v; want ErrNotSent with ENOBUFS", a, up, err)
			}
			if used, err := c.InUse(a); used || !errors.Is(err, ErrNotSent) || !errors.Is(err, syscall.ENOBUFS) {
				t.Errorf("check of %s with its echo dropped by the kernel: in use %v, %v; want ErrNotSent with ENOBUFS", a, used, err)
			}
			srv.Run(t, "tc", "qdisc", "del", "dev", "bcs0", "root")
			if used, err := c.InUse(a); !used || err != nil {
				t.Errorf("check of %s once the interface sends again: in use %v, %v; want in use, not taken as free from the refused check", a, used, err)
			}
		})
	}
}
