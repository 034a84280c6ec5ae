package boot

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/e2e/netns"
)

// grabHelper names the helper that takes leases under random MACs (netns.Grab).
const grabHelper = "grab"

// grabMain runs netns.Grab with the spec file and prints what it took as JSON.
func grabMain(specFile string) int {
	var spec netns.GrabSpec
	if err := readSpec(specFile, &spec); err != nil {
		fmt.Fprintln(os.Stderr, "grab:", err)
		return 2
	}
	got, err := netns.Grab(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grab:", err)
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(got)
	return 0
}

// runGrab runs the grabber in ns and returns what it took.
func runGrab(t *testing.T, ns *netns.NS, spec netns.GrabSpec) netns.Grabbed {
	t.Helper()
	out, err := helperCommand(t, ns, grabHelper, spec).Output()
	if err != nil {
		t.Fatalf("grab: %v", err)
	}
	var got netns.Grabbed
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestSpoofedMACsLeaveAddressesForKnownMachines: a host on the provisioning segment
// takes leases under random MACs until the server refuses it; then ISC dhclient with
// the MAC of a machine the site knows (a disk entry: an installed machine) still binds
// an address. With the default share, the host gets half the range and the known
// machine a free address; with no bound on the share, the host gets the whole range and
// the known machine takes the address of one of its leases.
func TestSpoofedMACsLeaveAddressesForKnownMachines(t *testing.T) {
	for _, c := range []struct {
		name       string
		share      float64
		maxGrabbed int
	}{{"default share", 0, 10}, {"no bound", 1, 20}} {
		t.Run(c.name, func(t *testing.T) {
			n := newTestNet(t, "dhclient")
			cfg := netConfig(t, Authoritative)
			cfg.Range.End = netip.MustParseAddr("10.99.0.119") // 20 addresses
			cfg.UnknownShare = c.share
			known := "02:00:00:00:00:05"
			startServer(t, n.server, cfg, map[string]Entry{known: {Kind: KindDisk}})

			got := runGrab(t, n.client, netns.GrabSpec{Interface: clientIf, Attempts: 100, Refusals: 3})
			t.Logf("the host took %d leases, %d DISCOVERs refused", len(got.Leases), got.Refused)
			if len(got.Leases) == 0 || len(got.Leases) > c.maxGrabbed {
				t.Errorf("the host took %d leases under random MACs, want 1-%d", len(got.Leases), c.maxGrabbed)
			}

			n.client.Run(t, "ip", "link", "set", clientIf, "down")
			n.client.Run(t, "ip", "link", "set", clientIf, "address", known)
			n.client.Run(t, "ip", "link", "set", clientIf, "up")
			out := filepath.Join(t.TempDir(), "events")
			n.client.StartDhclient(t, clientIf, strings.Replace(dhclientScript, "OUT", out, 1))
			deadline := time.Now().Add(30 * time.Second)
			for {
				b, _ := os.ReadFile(out)
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "BOUND ") }); i >= 0 {
					ip := strings.Fields(lines[i])[1]
					if c.share == 1 && !slices.Contains(got.Leases, ip) {
						t.Errorf("known machine bound %s, want the address of one of the host's leases %q", ip, got.Leases)
					}
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("the known machine bound no address in 30 s; events %q", lines)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
