package agentplane

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// linkProxy relays UDP between agents and the registry, and can cut the link: while cut,
// it drops every datagram, as a pulled cable would. It can also hold the datagrams from
// the agents (holdAfter) and send them on later (release), as a starved processor that
// reads them late would, and counts those it forwarded (up). It can lose the next
// datagrams from the registry (loseDown), and tells when it last forwarded one (downAt).
type linkProxy struct {
	front    *net.UDPConn
	upstream *net.UDPAddr
	cut      atomic.Bool
	up       atomic.Int64
	// losing is how many of the next datagrams from the registry are lost; down is when
	// the last one came (Unix nanoseconds).
	losing, down atomic.Int64
	mu           sync.Mutex
	backs        map[string]*net.UDPConn // one upstream socket per agent address
	// holding is set from holdAfter to release: the datagrams from agents after the
	// next passing are held, in order.
	holding bool
	passing int
	held    []heldDatagram
}

// heldDatagram is a datagram from an agent that the proxy holds.
type heldDatagram struct {
	from *net.UDPAddr
	b    []byte
}

func newLinkProxy(t *testing.T, registry string) *linkProxy {
	t.Helper()
	up, err := net.ResolveUDPAddr("udp", registry)
	if err != nil {
		t.Fatal(err)
	}
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{front: front, upstream: up, backs: map[string]*net.UDPConn{}}
	go p.forward()
	t.Cleanup(func() {
		front.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, b := range p.backs {
			b.Close()
		}
	})
	return p
}

// Addr is where agents dial.
func (p *linkProxy) Addr() string { return p.front.LocalAddr().String() }

func (p *linkProxy) forward() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.front.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if p.cut.Load() || p.held1(from, buf[:n]) {
			continue
		}
		if !p.send(from, buf[:n]) {
			return
		}
	}
}

// send forwards a datagram from an agent to the registry.
func (p *linkProxy) send(from *net.UDPAddr, b []byte) bool {
	back, err := p.back(from)
	if err != nil {
		return false
	}
	back.Write(b)
	p.up.Add(1)
	return true
}

// held1 holds a datagram from an agent, if the proxy holds them now.
func (p *linkProxy) held1(from *net.UDPAddr, b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.holding {
		return false
	}
	if p.passing > 0 {
		p.passing--
		return false
	}
	p.held = append(p.held, heldDatagram{from, append([]byte(nil), b...)})
	return true
}

// holdAfter makes the proxy forward the next pass datagrams from agents and hold the
// ones after them until release.
func (p *linkProxy) holdAfter(pass int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding, p.passing = true, pass
}

// release forwards the datagrams held, in the order they came, and holds no more.
func (p *linkProxy) release() {
	p.mu.Lock()
	held := p.held
	p.holding, p.held = false, nil
	p.mu.Unlock()
	for _, d := range held {
		p.send(d.from, d.b)
	}
}

// loseDown makes the proxy lose the next n datagrams from the registry.
func (p *linkProxy) loseDown(n int64) { p.losing.Store(n) }

// downAt is when the last datagram from the registry came.
func (p *linkProxy) downAt() time.Time { return time.Unix(0, p.down.Load()) }

// lost reports whether a datagram from the registry is lost (loseDown).
func (p *linkProxy) lost() bool {
	for {
		n := p.losing.Load()
		if n <= 0 {
			return false
		}
		if p.losing.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// back returns the upstream socket of an agent address, making it on first use.
func (p *linkProxy) back(agent *net.UDPAddr) (*net.UDPConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b := p.backs[agent.String()]; b != nil {
		return b, nil
	}
	b, err := net.DialUDP("udp", nil, p.upstream)
	if err != nil {
		return nil, err
	}
	p.backs[agent.String()] = b
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := b.Read(buf)
			if err != nil {
				return
			}
			p.down.Store(time.Now().UnixNano())
			if !p.cut.Load() && !p.lost() {
				p.front.WriteToUDP(buf[:n], agent)
			}
		}
	}()
	return b, nil
}
