package boot

import (
	"fmt"
	"strings"
	"time"

	"github.com/better-compute/better-compute/boot/dhcp"
	"github.com/better-compute/better-compute/boot/inuse"
)

// warnCheckLimits warns, once at start, when the host's limits on the echoes waiting for
// ARP (room, what the check's send buffer holds; neighbours, the neighbour table's
// gc_thresh3, when known) hold fewer than held, the echoes of the checks the DHCP server
// runs at once at its pace: each new address past them a second is left unanswered until
// its client sends again.
func (s *Server) warnCheckLimits(wait time.Duration, held, room, neighbours int, known bool) {
	capped := room
	if known {
		capped = min(capped, neighbours)
	}
	if capped >= held {
		return
	}
	var raise []string
	if room < held {
		raise = append(raise, fmt.Sprintf("net.core.wmem_max to %d (or run bcd site with CAP_NET_ADMIN, which sizes the buffer past it)", inuse.SendBufferFor(held)))
	}
	if known && neighbours < held {
		raise = append(raise, fmt.Sprintf("net.ipv4.neigh.default.gc_thresh3 to %d and gc_thresh2 to %d, in the host's network namespace", held+neighbours, held))
	}
	s.log.Warn("dhcp: the host's limits hold fewer echoes waiting for ARP than the conflict checks send: past them a second, a new "+
		"address's DHCPDISCOVER is left unanswered until its client sends it again; raise "+strings.Join(raise, ", and "),
		"checksPerSecond", capped*int(time.Second)/int(inuse.ARPWait), "offersPerSecond", dhcp.MaxInFlight*int(time.Second)/int(wait),
		"echoes", room, "neighbours", neighbours, "want", held)
}
