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
// router for a routed one, so one socket checks every subnet.
type Echo struct {
	conn socket
	// raw: the socket is a raw ICMP one, which sees every echo reply the host receives,
	// so replies are told apart by id too; a datagram ICMP socket sees only its own.
	raw  bool
	id   int
	wait time.Duration
	seq  atomic.Uint32
	read sync.WaitGroup
	// failed is told once when the socket fails for good (receive); stopped is closed
	// when the reader stops, for that or the socket's close.
	failed  func(error)
	stopped chan struct{}

	mu      sync.Mutex
	waiting map[echoKey]chan struct{}
}

// socket is what an Echo sends its echoes from and reads their replies on: an ICMP
// socket (*icmp.PacketConn), or a test's in its place.
type socket interface {
	ReadFrom(b []byte) (int, net.Addr, error)
	WriteTo(b []byte, to net.Addr) (int, error)
	Close() error
}

// echoKey is what an echo reply is matched by.
type echoKey struct {
	from netip.Addr
	seq  int
}

// payload is the data of each echo request.
var payload = []byte("bcd dhcp address check")

// ListenEcho opens the socket echoes go from, each waiting for its reply for wait: a
// datagram ICMP socket, which needs no privilege where net.ipv4.ping_group_range admits
// the process's group, else a raw one (root, or CAP_NET_RAW). failed is told, once, when
// the socket fails for good: from then on a Ping gets no answer.
func ListenEcho(wait time.Duration, failed func(error)) (*Echo, error) {
	conn, err := icmp.ListenPacket("udp4", "0.0.0.0")
	if err == nil {
		return newEcho(conn, false, wait, failed), nil
	}
	conn, rawErr := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
	if rawErr != nil {
		return nil, fmt.Errorf("inuse: no ICMP socket (datagram: %w; raw: %w)", err, rawErr)
	}
	return newEcho(conn, true, wait, failed), nil
}

// newEcho starts the reader of the socket conn (raw: a raw ICMP socket) and returns the
// Echo that sends from it.
func newEcho(conn socket, raw bool, wait time.Duration, failed func(error)) *Echo {
	e := &Echo{conn: conn, raw: raw, wait: wait, id: int(rand.Uint32N(1 << 16)), failed: failed, stopped: make(chan struct{}),
		waiting: map[echoKey]chan struct{}{}}
	e.read.Go(e.receive)
	return e
}

// Ping sends one echo request to ip and reports whether its reply came within the
// wait. An echo the host can not send (no route) is no answer, and so is one from a
// socket whose reader stopped (failed or closed): none is sent.
func (e *Echo) Ping(ip netip.Addr) bool {
	select {
	case <-e.stopped:
		return false
	default:
	}
	key := echoKey{from: ip, seq: int(uint16(e.seq.Add(1)))}
	got := make(chan struct{})
	e.mu.Lock()
	e.waiting[key] = got
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.waiting, key)
		e.mu.Unlock()
	}()
	b, err := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: e.id, Seq: key.seq, Data: payload}}).Marshal(nil)
	if err != nil {
		return false
	}
	var to net.Addr = &net.IPAddr{IP: ip.AsSlice()}
	if !e.raw {
		to = &net.UDPAddr{IP: ip.AsSlice()}
	}
	if _, err := e.conn.WriteTo(b, to); err != nil {
		return false
	}
	t := time.NewTimer(e.wait)
	defer t.Stop()
	select {
	case <-got:
		return true
	case <-t.C:
		return false
	case <-e.stopped:
		return false
	}
}

// receive reads echo replies, and tells the Ping waiting for each, until the socket
// closes or fails. A read error other than the close is the socket failed for good: a
// read that fails returns at once, so reading on would spin a core for nothing. The
// reader stops, tells failed, and the Pings get no answer from then on.
func (e *Echo) receive() {
	defer close(e.stopped)
	buf := make([]byte, 1500)
	for {
		n, from, err := e.conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			e.failed(fmt.Errorf("inuse: reading the ICMP socket: %w", err))
			return
		}
		key, ok := e.reply(buf[:n], from)
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

// Kind is the kind of socket the echoes go from: "datagram" or "raw".
func (e *Echo) Kind() string {
	if e.raw {
		return "raw"
	}
	return "datagram"
}

// reply is the key of b, received from from, when b is an echo reply to this Echo's
// requests: of its id on a raw socket (a datagram socket receives only its own).
func (e *Echo) reply(b []byte, from net.Addr) (echoKey, bool) {
	m, err := icmp.ParseMessage(ipv4.ICMPTypeEchoReply.Protocol(), b)
	if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
		return echoKey{}, false
	}
	echo, ok := m.Body.(*icmp.Echo)
	if !ok || e.raw && echo.ID != e.id {
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

// Close closes the socket and waits for its reader; a Ping waiting then gets no answer.
func (e *Echo) Close() error {
	err := e.conn.Close()
	e.read.Wait()
	return err
}
