package boot

import (
	"strings"
	"testing"

	"github.com/better-compute/better-compute/e2e/netns"
)

// Addresses of the conflict tests: a host holds taken, configured by hand, the first
// address of netConfig's range, which the server would offer first.
const (
	taken      = "10.99.0.100"
	takenAsker = "02:00:00:00:03:01"
)

// conflictNet is the test network with a host at taken; its boot server checks
// addresses from a datagram ICMP socket when datagram is set (net.ipv4.ping_group_range
// admitting root's group in its namespace), else from a raw one.
func conflictNet(t *testing.T, datagram bool) testNet {
	t.Helper()
	n := newTestNet(t, "busybox")
	host := netns.New(t, "host")
	n.lan.Attach(t, host, "bch0", taken+"/24", "")
	if datagram {
		n.server.Run(t, "sh", "-c", "echo '0 0' > /proc/sys/net/ipv4/ping_group_range")
	}
	return n
}

// conflictLogged reports whether log names the conflict at taken with the MAC that would
// have got it.
func conflictLogged(log string) bool {
	return strings.Contains(log, "a host answers at this address inside the DHCP range") && strings.Contains(log, "ip="+taken+" mac="+takenAsker)
}

// TestAddressInUseIsNotLeased: beside a host at taken, busybox udhcpc, a real DHCP
// client, is leased another address, and the server's log names the conflict: the
// address and the MAC that would have got it; checked from a raw ICMP socket (root) and
// from a datagram one. Before the check, the client was leased the host's address.
func TestAddressInUseIsNotLeased(t *testing.T) {
	for _, socket := range []string{"raw", "datagram"} {
		t.Run(socket, func(t *testing.T) {
			n := conflictNet(t, socket == "datagram")
			srv := startServer(t, n.server, netConfig(t, Authoritative), nil)
			if ip := udhcpc(t, n, takenAsker)["ip"]; ip == "" || ip == taken {
				t.Errorf("udhcpc leased %q beside a host at %s, want another address", ip, taken)
			}
			log := srv.log.String()
			if !conflictLogged(log) {
				t.Error("the conflict is not in the server's log")
			}
			if !strings.Contains(log, "socket="+socket) {
				t.Errorf("no checks from a %s socket in the log", socket)
			}
		})
	}
}

// TestConflictCheckOff: with conflictCheck false the client is leased the host's
// address, as every client was before the check, and nothing is logged of it.
func TestConflictCheckOff(t *testing.T) {
	n := conflictNet(t, false)
	cfg := netConfig(t, Authoritative)
	cfg.ConflictCheck = new(false)
	srv := startServer(t, n.server, cfg, nil)
	if ip := udhcpc(t, n, takenAsker)["ip"]; ip != taken {
		t.Errorf("udhcpc leased %q with the check off, want %s", ip, taken)
	}
	if conflictLogged(srv.log.String()) {
		t.Error("a conflict logged with the check off")
	}
}
