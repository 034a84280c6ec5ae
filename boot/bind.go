package boot

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/better-compute/better-compute/boot/ipxe"
)

// A machine's script (iPXE's /boot/<mac>.ipxe, GRUB's boot/<mac>.grub) may carry secrets:
// a ramdisk's single-use join token, the site cache's capabilities of its extra initrds
// or ISO. It goes only to the address the machine holds: in authoritative mode the
// address the site leased to that MAC, unexpired; in proxy mode the address the MAC's
// own last DHCPREQUEST carried, for at most learnedLife. Any other address gets the same
// answer for every MAC, whatever its entry (every kind alike, a disk entry's `exit`
// included): a wait that asks DHCP again before it asks for the script again, so that a
// machine whose lease ended or moved is bound again by its next DHCP.

// learnedLife is how long proxy mode takes an address a MAC's DHCPREQUEST carried as the
// machine's: the other server's lease time is not known here, and a machine that waits
// longer asks DHCP again before it gets its script.
const learnedLife = time.Hour

// maxLearned bounds the MACs whose addresses proxy mode remembers, about 8 MiB of them.
// A host sending DHCPREQUESTs under ever new MACs had each remembered for learnedLife,
// some 120 bytes apiece: at the rate the server answers, gigabytes an hour. Past it,
// once the addresses older than learnedLife are swept out, every address is forgotten,
// as the discoveries' memory is: a machine whose address went with them gets the wait
// that asks DHCP again, and its next DHCPREQUEST binds it again.
const maxLearned = 65536

// learned is the address each MAC's last DHCPREQUEST carried, in proxy mode, and when.
type learned struct {
	clock Clock

	mu    sync.Mutex
	addrs map[string]learnedAddr
	// sweepAt is the size of addrs at which stale addresses are swept out next.
	sweepAt int
}

// learnedAddr is the address a MAC's DHCPREQUEST carried, and when it came.
type learnedAddr struct {
	ip netip.Addr
	at time.Time
}

// newLearned is an empty memory of addresses on clock c.
func newLearned(c Clock) *learned {
	return &learned{clock: c, addrs: map[string]learnedAddr{}, sweepAt: 1024}
}

// learn records ip as mac's address from now.
func (l *learned) learn(mac net.HardwareAddr, ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, key := l.clock.Now(), mac.String()
	if _, had := l.addrs[key]; !had && len(l.addrs) >= l.sweepAt {
		l.sweep(now)
	}
	l.addrs[key] = learnedAddr{ip: ip, at: now}
}

// sweep drops the addresses older than learnedLife, and every address when maxLearned
// are left, before a new MAC's is added. l.mu is held.
func (l *learned) sweep(now time.Time) {
	for m, a := range l.addrs {
		if now.Sub(a.at) > learnedLife {
			delete(l.addrs, m)
		}
	}
	if len(l.addrs) >= maxLearned {
		clear(l.addrs)
	}
	l.sweepAt = min(maxLearned, max(1024, 2*len(l.addrs)))
}

// holds reports whether mac's last DHCPREQUEST, within learnedLife, carried ip.
func (l *learned) holds(mac string, ip netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.addrs[mac]
	return ok && a.ip == ip && l.clock.Now().Sub(a.at) <= learnedLife
}

// holds reports whether client is the address mac holds (see above).
func (s *Server) holds(mac net.HardwareAddr, client netip.Addr) bool {
	client = client.Unmap()
	if !client.IsValid() {
		return false
	}
	if s.learned != nil {
		return s.learned.holds(mac.String(), client)
	}
	for _, p := range s.pools {
		if p.Holds(mac.String(), client) {
			return true
		}
	}
	return false
}

// boundScript is the script mac gets when client asks for it by source ("http" or
// "tftp"): its own when client holds mac's address, else the wait that asks DHCP again,
// warned of at most once a minute: anyone may ask, for any MAC, as fast as it can send.
func (s *Server) boundScript(mac net.HardwareAddr, client netip.Addr, source string) ipxe.Script {
	if s.holds(mac, client) {
		return s.script(mac, source)
	}
	s.unboundWarn.Warn(s.log, s.clock.Now(), "requests", "boot script asked for from an address the machine does not hold: it gets the wait, "+
		"without its entry. requests counts them since the last such warn (at most one a minute); mac, client and source are the last's",
		"mac", mac.String(), "client", client.String(), "source", source)
	sc := s.waitScript(mac)
	sc.Rebind = true
	return sc
}
