package site

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// enrolledMAC is the boot NIC of acme's installed machine, which has no boot entry.
const enrolledMAC = "52:54:00:00:be:01"

// TestEnrolledMachineGetsAnAddressPastASpoofer: `bcd site` serves DHCP, authoritative
// over 20 addresses, in a network namespace, with the registry side (store, site
// service, agent endpoint) in a helper there. Once the site agent runs, acme enrolls an
// installed machine at the site: no workflow runs, so no boot entry names it. A host on
// the segment then takes leases under random MACs until the server refuses it, which
// holds the share of the range left to machines the site does not know; ISC dhclient
// with the enrolled machine's MAC still binds an address, since the registry put the
// MACs enrolled at the site into the site agent's NodeSpec (site.knownMacs) and the
// site's DHCP serves them as known. Before, the machine counted as unknown and got none.
func TestEnrolledMachineGetsAnAddressPastASpoofer(t *testing.T) {
	netns.Require(t, "dhclient")
	lan := netns.NewLAN(t)
	siteNS := netns.New(t, "site")
	lan.Attach(t, siteNS, "eth0", "10.77.0.1/24", "")
	work := t.TempDir()
	out := startHelper(t, siteNS, "enrolled", helperSpec{Work: work, Ramdisk: mkdir(t, work, "ramdisk"), BCD: testkit.Binary(t, "bcd")})
	testkit.WaitFor(t, "the site agent applying the NodeSpec that knows the enrolled machine", 60*time.Second, 100*time.Millisecond, func() bool {
		if strings.Contains(out.String(), "HELPER-FAILED") {
			t.Fatal("the registry side failed")
		}
		return strings.Contains(out.String(), "KNOWN-APPLIED")
	})

	spoofer := netns.New(t, "spoofer")
	lan.Attach(t, spoofer, "eth0", "", "02:00:00:00:be:7a")
	var got netns.Grabbed
	err := spoofer.Do(func() (err error) {
		got, err = netns.Grab(netns.GrabSpec{Interface: "eth0", Attempts: 100, Refusals: 3})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the spoofer took %d leases, %d DISCOVERs refused", len(got.Leases), got.Refused)
	if len(got.Leases) == 0 || len(got.Leases) > 10 || got.Refused == 0 {
		t.Fatalf("the spoofer took %d leases and was refused %d times: want the strangers' share, half the range, then refusals", len(got.Leases), got.Refused)
	}

	machine := netns.New(t, "machine")
	lan.Attach(t, machine, "eth0", "", enrolledMAC)
	ip := netip.MustParseAddr(dhclient(t, machine, "eth0"))
	if ip.Less(netip.MustParseAddr("10.77.0.100")) || netip.MustParseAddr("10.77.0.119").Less(ip) {
		t.Errorf("the enrolled machine bound %s, outside the range", ip)
	}
}

// runEnrolledHelper is the registry side of
// TestEnrolledMachineGetsAnAddressPastASpoofer: it starts the site's (startSiteSide),
// waits for bcd site to apply its first NodeSpec, enrolls acme's installed machine
// through the store, and prints KNOWN-APPLIED once bcd site applied the NodeSpec the
// site service wrote for it; then waits for SIGINT.
func runEnrolledHelper(ctx context.Context, spec helperSpec) error {
	side, err := startSiteSide(ctx, spec.Work, spec.BCD, func(*store.Tx) error { return nil }, map[string]any{"ramdiskDir": spec.Ramdisk})
	if err != nil {
		return err
	}
	defer side.close()
	// applied waits until bcd site applied a NodeSpec that holds, and returns it.
	applied := func(holds func(proto.NodeSpec) bool) (proto.NodeSpec, error) {
		for {
			var spec proto.NodeSpec
			var status store.AgentStatus
			err := side.st.View(func(tx *store.Tx) (err error) {
				if spec, err = tx.NodeSpec("rack-a"); err == nil {
					status, err = tx.AgentStatus("rack-a")
				}
				return err
			})
			if err == nil && holds(spec) && status.ObservedGeneration >= spec.Generation {
				return spec, nil
			}
			select {
			case <-ctx.Done():
				return spec, fmt.Errorf("bcd site applied no NodeSpec as wanted: %+v (status %+v, %v)", spec.Site, status, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if _, err := applied(func(proto.NodeSpec) bool { return true }); err != nil {
		return err
	}
	err = side.st.Update(func(tx *store.Tx) error {
		_, err := tx.CreateNode(store.Node{Tenant: "acme", Pool: "vms", MACs: []string{enrolledMAC}, State: store.NodeActive})
		return err
	})
	if err != nil {
		return err
	}
	known, err := applied(func(s proto.NodeSpec) bool { return s.Site != nil && len(s.Site.KnownMACs) > 0 })
	if err != nil {
		return err
	}
	fmt.Println("KNOWN-APPLIED", known.Generation, known.Site.KnownMACs)
	untilInterrupted()
	return nil
}
