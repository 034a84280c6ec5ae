package boot

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot/lease"
	"github.com/better-compute/better-compute/testkit"
)

// TestInitRebootOfAnAddressNeverLeased: a host on the segment sends, as a client in
// INIT-REBOOT would, a DHCPREQUEST for a free address of the range that was never
// offered or leased to its MAC; the authoritative server stays silent and stores no
// lease (RFC 2131 section 4.3.2). Before, it acknowledged the request and leased the
// address, without the check it makes before it offers an address no lease accounts
// for: a host could take any address it named, one a machine configured by hand uses
// among them.
func TestInitRebootOfAnAddressNeverLeased(t *testing.T) {
	n := newTestNet(t)
	cfg := netConfig(t, Authoritative)
	srv := startServer(t, n.server, cfg, nil)
	const never, host = "10.99.0.150", "02:00:00:00:04:01"
	if got := runProbe(t, n.client, probeSpec{Interface: clientIf, MAC: host, Wait: 1500 * time.Millisecond, Reboot: never}); len(got) != 0 {
		t.Errorf("INIT-REBOOT for %s, never leased to %s, answered %+v; want silence", never, host, got)
	}
	srv.stop()
	store, err := lease.Open(cfg.LeaseFile)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	all, err := store.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 0 {
		t.Errorf("leases stored after an unanswered INIT-REBOOT: %+v", all)
	}
}

// TestRequestByState: the authoritative server answers each DHCPREQUEST by its client's
// state (RFC 2131 section 4.3.2). ISC dhclient, a real client, binds an address, is
// stopped without releasing it, and started again with its lease file: it asks again
// for its address (INIT-REBOOT) and is acknowledged (REBOOT, not the BOUND of a new
// exchange after a DHCPNAK). Probes then send, under its MAC, an INIT-REBOOT for
// another address (DHCPNAK: the client's notion is wrong), one for an address off the
// subnet (DHCPNAK: another network); under another MAC, a DHCPREQUEST selecting this
// server for an address it was not offered (DHCPNAK), and a renewal of a free address
// from it (DHCPACK: a client keeps its address after the lease file is lost).
func TestRequestByState(t *testing.T) {
	n := newTestNet(t, "dhclient")
	startServer(t, n.server, netConfig(t, Authoritative), nil)
	const machine = "02:00:00:00:00:01" // clientIf's MAC
	dir := t.TempDir()
	leases, out := filepath.Join(dir, "leases"), filepath.Join(dir, "events")
	script := strings.Replace(`#!/bin/sh
echo "$reason $new_ip_address" >> OUT
case "$reason" in
BOUND|REBOOT) ip addr add "$new_ip_address/24" dev "$interface" ;;
esac
exit 0
`, "OUT", out, 1)
	event := func(reasons ...string) []string {
		var got []string
		testkit.WaitFor(t, "dhclient's "+strings.Join(reasons, " or "), 30*time.Second, 100*time.Millisecond, func() bool {
			b, _ := os.ReadFile(out)
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if f := strings.Fields(l); len(f) == 2 && slices.Contains(reasons, f[0]) {
					got = f
					return true
				}
			}
			return false
		})
		return got
	}
	stop := n.client.StartDhclientLeases(t, clientIf, script, leases)
	bound := event("BOUND")[1]
	// dhclient may run its script before its lease file holds the lease: stopped in
	// between (a loaded machine), it starts again with no lease and DISCOVERs.
	testkit.WaitFor(t, "dhclient's lease file to hold "+bound, 30*time.Second, 100*time.Millisecond, func() bool {
		b, _ := os.ReadFile(leases)
		return strings.Contains(string(b), "fixed-address "+bound+";")
	})
	stop()
	n.client.Run(t, "ip", "addr", "flush", "dev", clientIf)
	os.Remove(out)
	n.client.StartDhclientLeases(t, clientIf, script, leases)
	if got := event("BOUND", "REBOOT"); got[0] != "REBOOT" || got[1] != bound {
		t.Errorf("dhclient started again with its lease of %s: %s %s, want REBOOT %s", bound, got[0], got[1], bound)
	}

	other := "10.99.0.150"
	if bound == other {
		other = "10.99.0.151"
	}
	probe := func(spec probeSpec) []string {
		spec.Interface, spec.Wait = clientIf, 1500*time.Millisecond
		var got []string
		for _, r := range runProbe(t, n.client, spec) {
			got = append(got, r.Type+" "+r.YourIP)
		}
		return got
	}
	for _, c := range []struct {
		name string
		spec probeSpec
		want []string
	}{
		{"INIT-REBOOT for another address than the lease", probeSpec{MAC: machine, Reboot: other}, []string{"NAK 0.0.0.0"}},
		{"INIT-REBOOT off the subnet", probeSpec{MAC: machine, Reboot: "192.168.7.9"}, []string{"NAK 0.0.0.0"}},
		{"SELECTING an address not offered", probeSpec{MAC: "02:00:00:00:04:02", Select: true, Request: other}, nil},
		{"renewal of a free address", probeSpec{MAC: "02:00:00:00:04:03", Renew: "10.99.0.160"}, []string{"ACK 10.99.0.160"}},
	} {
		got := probe(c.spec)
		if c.spec.Select {
			// The offer, of another address, then the DHCPNAK.
			if len(got) != 2 || !strings.HasPrefix(got[0], "OFFER ") || got[0] == "OFFER "+other || got[1] != "NAK 0.0.0.0" {
				t.Errorf("%s: replies %q, want an offer of another address than %s, then NAK 0.0.0.0", c.name, got, other)
			}
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: replies %q, want %q", c.name, got, c.want)
		}
	}
}
