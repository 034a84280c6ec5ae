package agentplane

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// linkProxy relays UDP between agents and the registry, and can cut the link: while cut,
// it drops every datagram, as a pulled cable would.
type linkProxy struct {
	front    *net.UDPConn
	upstream *net.UDPAddr
	cut      atomic.Bool
	mu       sync.Mutex
	backs    map[string]*net.UDPConn // one upstream socket per agent address
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
		if p.cut.Load() {
			continue
		}
		back, err := p.back(from)
		if err != nil {
			return
		}
		back.Write(buf[:n])
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
			if !p.cut.Load() {
				p.front.WriteToUDP(buf[:n], agent)
			}
		}
	}()
	return b, nil
}
