package inuse

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// Echo sends ICMP echo requests from one socket and matches the echo replies to them by
// source address and sequence number. An echo goes where the host's routes send it: on
// the provisioning segment for an address of the local subnet, through the rack's
// router for a routed one, so one socket checks every subnet. A socket that fails is
// opened again, after FirstReopen and then twice as long each time up to LastReopen.
type Echo struct {
	open   func() (socket, bool, error)
	health Health
	id     int
	wait   time.Duration
	seq    atomic.Uint32
	read   sync.WaitGroup
	// closing is closed by Close: a reopen waiting for its turn gives up.
	closing chan struct{}

	mu sync.Mutex
	// link is the socket open now; nil from its failure until one opens again.
	link    *link
	closed  bool
	waiting map[echoKey]chan struct{}
}

// Health is told of the socket's failures and returns. Each is told from the reader's
// goroutine, one at a time, Failed and Back in turn.
type Health struct {
	// Failed: the socket failed (a read error other than its close); Pings get no
	// answer, and send no echo, until Back.
	Failed func(error)
	// Back: a socket opened again after Failed; Pings are answered again.
	Back func()
}

// FirstReopen and LastReopen bound the wait before each attempt to open the socket
// again after it failed: FirstReopen before the first, twice the wait before each
// next, at most LastReopen. A socket that reads again starts the next failure's waits
// at FirstReopen; one that opens but fails before it reads anything goes on doubling,
// so a socket that fails at once is not reopened in a loop.
const (
	FirstReopen = time.Second
	LastReopen  = time.Minute
)

// link is one opened socket.
type link struct {
	conn socket
	// raw: the socket is a raw ICMP one, which sees every echo reply the host receives,
	// so replies are told apart by id too; a datagram ICMP socket sees only its own.
	raw bool
	// down is closed when the socket failed or closed: the Pings waiting on it give up.
	down chan struct{}
}

// socket is what an Echo sends its echoes from and reads their replies on: an ICMP
// socket (icmpSocket), or a test's in its place.
type socket interface {
	ReadFrom(b []byte) (int, net.Addr, error)
	WriteTo(b []byte, to net.Addr) (int, error)
	Close() error
	// room is how many echoes waiting for ARP its send buffer holds.
	room() int
}

// echoKey is what an echo reply is matched by.
type echoKey struct {
	from netip.Addr
	seq  int
}

// ErrNotSent: a check's echo request could not be sent, so the check tells nothing of
// its address. The kernel refuses an echo (ENOBUFS, or EAGAIN on a datagram socket) while
// the echoes before it fill the socket's send buffer (Room) or the neighbour table
// (net.ipv4.neigh.default.gc_thresh3): an echo to an address of the segment that nothing
// answers waits in both for ARP (ARPWait).
var ErrNotSent = errors.New("inuse: the echo request was not sent")

// ErrDown: the socket was down (failed and not yet open again, or closed) when a check's
// echo was to go, or went down while it waited for its reply, so the check tells nothing
// of its address. Unlike ErrNotSent it asks for no remedy of its own: Health tells of the
// socket, and the DHCP server offers unchecked until it is back (Checker.InUse reports
// no host then, and remembers nothing).
var ErrDown = errors.New("inuse: the check's ICMP socket is down")

// payload is the data of each echo request.
var payload = []byte("bcd dhcp address check")

// ListenEcho opens the socket echoes go from, each waiting for its reply for wait: a
// datagram ICMP socket, which needs no privilege where net.ipv4.ping_group_range admits
// the process's group, else a raw one (root, or CAP_NET_RAW). Its send buffer is sized
// for echoes echoes waiting for ARP at once (Room tells what the kernel granted). When the
// socket fails it is opened again (see FirstReopen), and health is told of both.
func ListenEcho(wait time.Duration, echoes int, health Health) (*Echo, error) {
	return newEcho(func() (socket, bool, error) {
		s, err := listenICMP(echoes)
		if err != nil {
			return nil, false, err
		}
		return s, s.raw, nil
	}, wait, health)
}

// newEcho opens a socket with open (raw: a raw ICMP one), starts its reader and returns
// the Echo that sends from it; open opens the socket again after it failed.
func newEcho(open func() (socket, bool, error), wait time.Duration, health Health) (*Echo, error) {
	conn, raw, err := open()
	if err != nil {
		return nil, err
	}
	e := &Echo{open: open, health: health, wait: wait, id: int(rand.Uint32N(1 << 16)), closing: make(chan struct{}),
		waiting: map[echoKey]chan struct{}{}}
	e.link = &link{conn: conn, raw: raw, down: make(chan struct{})}
	first := e.link
	e.read.Go(func() { e.run(first) })
	return e, nil
}

// Ping sends one echo request to ip and reports whether its reply came within the
// wait. An echo the host refuses to send (no buffer, no route) is ErrNotSent: the check
// did not run. While the socket is down (failed and not yet open again, or closed) none
// is sent, and a Ping waiting when it went down stops waiting: both are ErrDown, as
// Health told.
func (e *Echo) Ping(ip netip.Addr) (bool, error) {
	key := echoKey{from: ip, seq: int(uint16(e.seq.Add(1)))}
	got := make(chan struct{})
	e.mu.Lock()
	l := e.link
	if l == nil {
		e.mu.Unlock()
		return false, fmt.Errorf("%w: no echo to %s", ErrDown, ip)
	}
	e.waiting[key] = got
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.waiting, key)
		e.mu.Unlock()
	}()
	b, err := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: e.id, Seq: key.seq, Data: payload}}).Marshal(nil)
	if err != nil {
		return false, fmt.Errorf("%w to %s: %w", ErrNotSent, ip, err)
	}
	var to net.Addr = &net.IPAddr{IP: ip.AsSlice()}
	if !l.raw {
		to = &net.UDPAddr{IP: ip.AsSlice()}
	}
	if _, err := l.conn.WriteTo(b, to); err != nil {
		return false, fmt.Errorf("%w to %s: %w", ErrNotSent, ip, err)
	}
	t := time.NewTimer(e.wait)
	defer t.Stop()
	select {
	case <-got:
		return true, nil
	case <-t.C:
		return false, nil
	case <-l.down:
		return false, fmt.Errorf("%w: the echo to %s went unanswered", ErrDown, ip)
	}
}

// run reads the replies of l's socket and, each time the socket fails, opens one again
// after a wait (reopen), until Close.
func (e *Echo) run(l *link) {
	delay := FirstReopen
	for {
		read, err := e.receive(l)
		if err == nil {
			return
		}
		if read {
			delay = FirstReopen
		}
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return
		}
		e.link = nil
		close(l.down)
		e.mu.Unlock()
		l.conn.Close()
		e.health.Failed(err)
		if l = e.reopen(&delay); l == nil {
			return
		}
		e.health.Back()
	}
}

// receive reads echo replies, and tells the Ping waiting for each, until the socket
// closes (nil) or fails: a read error other than the close, after which a read fails
// again at once, so reading on would spin a core for nothing. read says whether any
// read succeeded.
func (e *Echo) receive(l *link) (read bool, err error) {
	buf := make([]byte, 1500)
	for {
		n, from, err := l.conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return read, nil
		}
		if err != nil {
			return read, fmt.Errorf("inuse: reading the ICMP socket: %w", err)
		}
		read = true
		key, ok := e.reply(buf[:n], from, l.raw)
		if !ok {
			continue
		}
		e.mu.Lock()
		if got, ok := e.waiting[key]; ok {
			close(got)
			delete(e.waiting, key)
		}
		e.mu.Unlock()
	}
}

// reopen opens the socket again, waiting *delay before each attempt and doubling it
// after (up to LastReopen), and returns its link once installed; nil when Close came
// first.
func (e *Echo) reopen(delay *time.Duration) *link {
	for {
		t := time.NewTimer(*delay)
		select {
		case <-e.closing:
			t.Stop()
			return nil
		case <-t.C:
		}
		*delay = min(2**delay, LastReopen)
		conn, raw, err := e.open()
		if err != nil {
			continue
		}
		l := &link{conn: conn, raw: raw, down: make(chan struct{})}
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			conn.Close()
			return nil
		}
		e.link = l
		e.mu.Unlock()
		return l
	}
}

// Room is how many echoes waiting for ARP at once the open socket's send buffer holds, as
// the kernel granted it; 0 while none is open.
func (e *Echo) Room() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.link == nil {
		return 0
	}
	return e.link.conn.room()
}

// Kind is the kind of socket the echoes go from: "datagram" or "raw"; "" while none is
// open.
func (e *Echo) Kind() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.link == nil:
		return ""
	case e.link.raw:
		return "raw"
	}
	return "datagram"
}

// reply is the key of b, received from from, when b is an echo reply to this Echo's
// requests: of its id on a raw socket (a datagram socket receives only its own).
func (e *Echo) reply(b []byte, from net.Addr, raw bool) (echoKey, bool) {
	m, err := icmp.ParseMessage(ipv4.ICMPTypeEchoReply.Protocol(), b)
	if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
		return echoKey{}, false
	}
	echo, ok := m.Body.(*icmp.Echo)
	if !ok || raw && echo.ID != e.id {
		return echoKey{}, false
	}
	var src netip.Addr
	switch a := from.(type) {
	case *net.IPAddr:
		src, _ = netip.AddrFromSlice(a.IP)
	case *net.UDPAddr:
		src, _ = netip.AddrFromSlice(a.IP)
	}
	return echoKey{from: src.Unmap(), seq: echo.Seq}, src.IsValid()
}

// Close closes the socket, stops its reopening and waits for its reader; a Ping
// waiting then, and one after, which sends no echo, are ErrDown.
func (e *Echo) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.closing)
	l := e.link
	e.link = nil
	if l != nil {
		close(l.down)
	}
	e.mu.Unlock()
	var err error
	if l != nil {
		err = l.conn.Close()
	}
	e.read.Wait()
	return err
}
