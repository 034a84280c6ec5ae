package fetchtest

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// Counted is a loopback HTTPS server that counts the connections made to it: a host
// inside the platform's network that a fetch must never reach, so a test can tell that
// none was even opened.
type Counted struct {
	*httptest.Server
	conns atomic.Int64
}

// NewCounted starts h on 127.0.0.1 over HTTPS, closed when the test ends. It serves
// certs when given (one for a name the test resolves to loopback), else httptest's
// certificate, which its Client trusts as it does every httptest server's.
func NewCounted(t testing.TB, h http.Handler, certs ...tls.Certificate) *Counted {
	c := &Counted{Server: httptest.NewUnstartedServer(h)}
	if len(certs) > 0 {
		c.TLS = &tls.Config{Certificates: certs}
	}
	c.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			c.conns.Add(1)
		}
	}
	c.StartTLS()
	t.Cleanup(c.Close)
	return c
}

// Conns is the number of connections accepted so far.
func (c *Counted) Conns() int64 { return c.conns.Load() }

// Host is the server's HOST:PORT, as an image source pattern names it.
func (c *Counted) Host() string { return c.Listener.Addr().String() }

// Port is the server's port.
func (c *Counted) Port() string {
	_, p, _ := net.SplitHostPort(c.Host())
	return p
}
