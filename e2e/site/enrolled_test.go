package site

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

const (
	// enrolledMAC is the boot NIC of acme's installed machine, which has no boot entry.
	enrolledMAC = "52:54:00:00:be:01"
	// enrolledHelperEnv makes the test binary the registry side of
	// TestEnrolledMachineGetsAnAddressPastASpoofer; its value is the work directory.
	enrolledHelperEnv = "BC_SITE_ENROLLED_HELPER"
)

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
	data, _ := json.Marshal(helperSpec{Work: work, Ramdisk: mkdir(t, work, "ramdisk"), BCD: testkit.Binary(t, "bcd")})
	testkit.WriteFile(t, filepath.Join(work, "helper.json"), data, 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	helper := siteNS.Command(ctx, os.Args[0], "-test.run=^TestEnrolledHelper$", "-test.v")
	helper.Env = append(os.Environ(), enrolledHelperEnv+"="+work)
	var out netns.SyncBuffer
	helper.Stdout, helper.Stderr = &out, &out
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		helper.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { helper.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cancel()
			<-done
		}
		if t.Failed() {
			t.Logf("registry side and bcd site:\n%s", out.String())
		}
	})
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

// TestEnrolledHelper is the registry side of TestEnrolledMachineGetsAnAddressPastASpoofer;
// it runs only as its helper.
func TestEnrolledHelper(t *testing.T) {
	work := os.Getenv(enrolledHelperEnv)
	if work == "" {
		t.Skip("the helper of TestEnrolledMachineGetsAnAddressPastASpoofer")
	}
	if err := runEnrolledHelper(work); err != nil {
		fmt.Println("HELPER-FAILED:", err)
		t.Fatal(err)
	}
}

// runEnrolledHelper starts the registry side of the site (startSiteSide), waits for bcd
// site to apply its first NodeSpec, enrolls acme's installed machine through the store,
// and prints KNOWN-APPLIED once bcd site applied the NodeSpec the site service wrote
// for it; then waits for SIGINT.
func runEnrolledHelper(work string) error {
	data, err := os.ReadFile(filepath.Join(work, "helper.json"))
	if err != nil {
		return err
	}
	var spec helperSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Second)
	defer cancel()
	side, err := startSiteSide(ctx, work, spec.BCD, func(*store.Tx) error { return nil }, map[string]any{"ramdiskDir": spec.Ramdisk})
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
	stop, done := signal.NotifyContext(context.Background(), os.Interrupt)
	defer done()
	<-stop.Done()
	return nil
}
