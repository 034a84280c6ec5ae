package boot

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/e2e/netns"
)

// snmpCounter is the counter name of proto's lines ("Udp", "Icmp") in ns's
// /proc/net/snmp; the benchmark fails when there is none.
func snmpCounter(b *testing.B, ns *netns.NS, proto, name string) int {
	b.Helper()
	n, err := snmpField(ns.Run(b, "cat", "/proc/net/snmp"), proto, name)
	if err != nil {
		b.Fatalf("%s's /proc/net/snmp: %v", ns.Name, err)
	}
	return n
}

// snmpField is the counter name of proto in text, as /proc/net/snmp has it: a line of
// the counters' names after "proto:", then a line of their values after the same.
func snmpField(text, proto string, name string) (int, error) {
	var head []string
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != proto+":" {
			continue
		}
		if head == nil {
			head = f
			continue
		}
		i := slices.Index(head, name)
		if i < 1 || i >= len(f) {
			break
		}
		return strconv.Atoi(f[i])
	}
	return 0, fmt.Errorf("no %s %s counter", proto, name)
}

// echoesSent is how many ICMP echo requests ns sent so far (OutEchos of its
// /proc/net/snmp): in a server's namespace, its checks of addresses before it offers
// them, the boot server's conflictCheck and dnsmasq's ping alike.
func echoesSent(b *testing.B, ns *netns.NS) int {
	b.Helper()
	return snmpCounter(b, ns, "Icmp", "OutEchos")
}

// sameChecks is nil when, in each round, both servers checked addresses with ICMP
// echoes or neither did; ours[i] and peer[i] are the echoes each sent in round i. A
// ratio of a server that checks over one that does not compares unequal work: the check
// costs each new address its wait (500 ms the boot server's, 3 s dnsmasq's), so a side
// whose check did not run (its socket did not open, an option left it off) would be
// measured against a side that waits.
func sameChecks(ours, peer []int) error {
	for i := range ours {
		if (ours[i] > 0) != (peer[i] > 0) {
			return fmt.Errorf("round %d: the boot server sent %d ICMP echoes and the peer %d: one side checked addresses "+
				"before offering them and the other did not, so the ratio compares unequal work; look at the boot "+
				"server's log for why its conflict check did not run, or at dnsmasq's arguments for --no-ping", i+1, ours[i], peer[i])
		}
	}
	return nil
}
