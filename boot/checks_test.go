package boot

import (
	"strings"
	"testing"
)

// snmpText is a namespace's /proc/net/snmp, its Icmp and Udp lines (Linux 6.1).
const snmpText = `Ip: Forwarding DefaultTTL InReceives
Ip: 2 64 120
Icmp: InMsgs InErrors InCsumErrors InDestUnreachs OutMsgs OutEchos OutEchoReps
Icmp: 3 0 0 1 1503 1500 2
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
Udp: 57594 0 12 4000 741 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
UdpLite: 0 0 0 0 9 0
`

func TestSnmpField(t *testing.T) {
	for _, c := range []struct {
		proto, name string
		want        int
	}{{"Icmp", "OutEchos", 1500}, {"Udp", "RcvbufErrors", 741}, {"UdpLite", "RcvbufErrors", 9}, {"Ip", "InReceives", 120}} {
		if got, err := snmpField(snmpText, c.proto, c.name); err != nil || got != c.want {
			t.Errorf("%s %s: %d, %v; want %d", c.proto, c.name, got, err, c.want)
		}
	}
	for _, c := range []struct{ text, proto, name string }{
		{snmpText, "Icmp", "OutEchoes"},
		{snmpText, "Tcp", "OutSegs"},
		{"Icmp: InMsgs OutEchos\n", "Icmp", "OutEchos"},
		{"Icmp: InMsgs OutEchos\nIcmp: 3\n", "Icmp", "OutEchos"},
		{"Icmp: InMsgs OutEchos\nIcmp: 3 x\n", "Icmp", "OutEchos"},
	} {
		if got, err := snmpField(c.text, c.proto, c.name); err == nil {
			t.Errorf("%s %s of %q: %d, want an error", c.proto, c.name, c.text, got)
		}
	}
}

func TestSameChecks(t *testing.T) {
	if err := sameChecks([]int{1000, 3}, []int{6, 12}); err != nil {
		t.Errorf("both checked: %v", err)
	}
	if err := sameChecks([]int{0, 0}, []int{0, 0}); err != nil {
		t.Errorf("neither checked: %v", err)
	}
	// The boot server's socket did not open (it offers unchecked) while dnsmasq pings,
	// in the second round: the ratio would favour the boot server.
	err := sameChecks([]int{1000, 0}, []int{6, 6})
	if err == nil || !strings.Contains(err.Error(), "round 2") {
		t.Errorf("the boot server unchecked in round 2: %v, want an error naming round 2", err)
	}
	// dnsmasq run with --no-ping while the boot server checks.
	if err := sameChecks([]int{1000}, []int{0}); err == nil {
		t.Error("dnsmasq unchecked: no error")
	}
}
