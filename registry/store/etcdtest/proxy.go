package etcdtest

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards a client's connections to one member, and can lose or hold what the
// member answers: a request still reaches the member, and a write is applied, while its
// answer never comes back, as when the link breaks after the request went through, or
// comes back late.
type Proxy struct {
	// Endpoint is the client URL that reaches the member through the proxy.
	Endpoint string
	target   string
	ln       net.Listener
	losing   atomic.Bool
	mu       sync.Mutex
	conns    []net.Conn
	released chan struct{} // while held, closed by Release; nil when not held
}

// Proxy starts a proxy to member i (of a cluster without TLS), stopped when t ends.
func (c *Cluster) Proxy(t testing.TB, i int) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Endpoint: "http://" + ln.Addr().String(), target: strings.TrimPrefix(c.Endpoints[i], "http://"), ln: ln}
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.Release()
		p.closeConns()
	})
	return p
}

// LoseAnswers drops, from now on, every byte the member sends back.
func (p *Proxy) LoseAnswers() { p.losing.Store(true) }

// Heal closes every connection (the bytes lost left them broken), and forwards the
// member's answers again on the connections the client makes next.
func (p *Proxy) Heal() {
	p.closeConns()
	p.losing.Store(false)
}

// Hold keeps, from now on, what the member answers until Release.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released == nil {
		p.released = make(chan struct{})
	}
}

// Release sends what Hold kept, and forwards the member's answers again.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released != nil {
		close(p.released)
		p.released = nil
	}
}

// waitReleased returns once the proxy is not held.
func (p *Proxy) waitReleased() {
	for {
		p.mu.Lock()
		ch := p.released
		p.mu.Unlock()
		if ch == nil {
			return
		}
		<-ch
	}
}

func (p *Proxy) closeConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		member, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, member)
		p.mu.Unlock()
		go func() {
			io.Copy(member, client)
			member.Close()
		}()
		go p.answer(client, member)
	}
}

// answer copies what member sends to client, unless the proxy loses it, each piece once
// the proxy is not held.
func (p *Proxy) answer(client, member net.Conn) {
	defer client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := member.Read(buf)
		if n > 0 {
			p.waitReleased()
		}
		if n > 0 && !p.losing.Load() {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
