package boot

import (
	"crypto/rand"
	"io"
	"net"
	"os"
	"sync"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// dhcpMux shares one client socket among the simulated machines, by transaction id.
type dhcpMux struct {
	conn net.PacketConn
	mu   sync.Mutex
	wait map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4
}

func (m *dhcpMux) run() {
	buf := make([]byte, 1500)
	for {
		n, _, err := m.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		r, err := dhcpv4.FromBytes(buf[:n])
		if err != nil || r.OpCode != dhcpv4.OpcodeBootReply {
			continue
		}
		m.mu.Lock()
		ch := m.wait[r.TransactionID]
		m.mu.Unlock()
		if ch != nil {
			select {
			case ch <- r:
			default:
			}
		}
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// randomFile writes n random bytes to path.
func randomFile(path string, n int) error {
	b := make([]byte, n)
	rand.Read(b)
	return os.WriteFile(path, b, 0o644)
}
