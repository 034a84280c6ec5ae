package dhcp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// MaxInFlight bounds the requests answered at once; more wait in the socket's buffer. Each
// checks at most one address at a time (Authoritative.InUse).
const MaxInFlight = 512

// Serve reads requests from conn and answers each with h in a goroutine of its own, so
// that exchanges waiting for the lease file share its commits; a release another host
// sent in a client's name is dropped before h sees it (fromClient). It returns when ctx
// ends (closing conn) or reading fails, after the answers in flight were sent.
func Serve(ctx context.Context, conn net.PacketConn, h Handler, log *slog.Logger) error {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, MaxInFlight)
	for {
		buf := make([]byte, 1500)
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		peer, ok := from.(*net.UDPAddr)
		if !ok {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			req, err := dhcpv4.FromBytes(buf[:n])
			if err != nil {
				log.Debug("dhcp: malformed packet", "from", peer, "err", err)
				return
			}
			if !fromClient(req, peer) {
				log.Debug("dhcp: a DHCPRELEASE not from the address it releases, or through a relay agent: another host's, dropped",
					"mac", req.ClientHWAddr.String(), "ciaddr", req.ClientIPAddr.String(), "giaddr", req.GatewayIPAddr.String(), "from", peer)
				return
			}
			resp, ok := h(req)
			if !ok {
				return
			}
			if _, err := conn.WriteTo(resp.ToBytes(), Destination(req, resp, peer)); err != nil {
				log.Warn("dhcp: reply not sent", "mac", req.ClientHWAddr.String(), "err", err)
			}
		})
	}
}

// fromClient reports whether req, from peer, may be its client's own. A DHCPRELEASE is
// sent by the client itself, unicast from the address it gives up (RFC 2131 section
// 4.4.6), and no relay agent forwards one: a release from another address, or carrying a
// giaddr, is another host's, naming a machine's MAC and address it saw, and ended the
// machine's lease while the machine went on using the address (its script was then
// withheld from it, and its address offered to others).
func fromClient(req *dhcpv4.DHCPv4, peer *net.UDPAddr) bool {
	if req.MessageType() != dhcpv4.MessageTypeRelease {
		return true
	}
	ciaddr := addr(req.ClientIPAddr)
	return !addr(req.GatewayIPAddr).IsValid() && ciaddr.IsValid() && addr(peer.IP) == ciaddr
}

// Destination is where a reply goes (RFC 2131 section 4.1): to the relay agent when
// there is one; broadcast for a DHCPNAK; back to the sender when the client has an
// address (a renewal, or a request to the proxyDHCP port 4011); broadcast otherwise, as
// a client without an address can not answer ARP.
func Destination(req, resp *dhcpv4.DHCPv4, peer *net.UDPAddr) *net.UDPAddr {
	bcast := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
	switch {
	case addr(req.GatewayIPAddr).IsValid():
		return &net.UDPAddr{IP: req.GatewayIPAddr, Port: dhcpv4.ServerPort}
	case resp.MessageType() == dhcpv4.MessageTypeNak:
		return bcast
	case addr(req.ClientIPAddr).IsValid() && addr(peer.IP).IsValid():
		return peer
	default:
		return bcast
	}
}
