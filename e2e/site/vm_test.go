package site

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/site"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

const (
	vmMAC  = "52:54:00:12:34:56"
	vmUUID = "12345678-9abc-def0-1122-334455667788"
	// vmROM is the e1000 iPXE ROM of Debian's ipxe-qemu.
	vmROM = "/usr/lib/ipxe/qemu/efi-e1000.rom"
	// marker is what the test ramdisk's /init prints on the serial console.
	marker = "BC-RAMDISK-UP cmdline: "
)

// TestSiteBootsVM runs `bcd site` alone in a network namespace, with its registry
// session, and a qemu VM (TCG, its built-in iPXE ROM, a tap on the site's segment) held
// off by -S. The registry side (its agent endpoint, store and site service, in a helper
// process in the site's namespace) knows the VM as a node enrolled by its product UUID
// only. It relays power.setPower on to the site, which powers the VM on through its QMP
// socket; the VM network-boots without an entry and waits, the site reports it in
// `discoveries`, and the registry proposes its MAC for the node. The registry then
// pushes the site a NodeSpec with a ramdisk entry for that MAC, and the waiting VM boots
// the test ramdisk, whose console line shows the entry's command line. Another tenant's
// host on the segment, leased an address of its own, then asks for the VM's script by
// its MAC and gets no token.
func TestSiteBootsVM(t *testing.T) {
	netns.Require(t, "qemu-system-x86_64", "dhclient", "curl")
	if _, err := os.Stat(vmROM); err != nil {
		t.Skipf("needs qemu's iPXE ROMs (ipxe-qemu): %v", err)
	}
	ramdisk := testkit.RamdiskImage(t)
	lan := netns.NewLAN(t)
	siteNS := netns.New(t, "site")
	lan.Attach(t, siteNS, "eth0", "10.77.0.1/24", "")
	work := t.TempDir()
	qmpSock := filepath.Join(work, "vm.qmp")
	console := startVM(t, lan, qmpSock)

	out := startHelper(t, siteNS, "vm", helperSpec{Work: work, Ramdisk: ramdisk, BCD: testkit.Binary(t, "bcd"), QMP: qmpSock})
	start := time.Now()
	var line string
	deadline := time.Now().Add(240 * time.Second)
	for {
		b, _ := os.ReadFile(console)
		_, rest, ok := strings.Cut(string(b), marker)
		if ok && strings.Contains(rest, "\n") {
			line, _, _ = strings.Cut(rest, "\n")
			break
		}
		if strings.Contains(out.String(), "HELPER-FAILED") || time.Now().After(deadline) {
			t.Fatalf("the VM did not boot the ramdisk; console:\n%s", b)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("ramdisk up after %s", time.Since(start).Round(time.Second))
	want := "initrd=initrd console=ttyS0 panic=-1 bc.node=vm-1 bc.registry=https://registry.test:7443 bc.pins=sha256/AAAA,sha256/BBBB,sha256/CCCC bc.token=bcj_vm.token"
	if strings.TrimSpace(line) != want {
		t.Errorf("ramdisk command line\n got: %q\nwant: %q", line, want)
	}
	if !strings.Contains(out.String(), "POWERED-ON") || !strings.Contains(out.String(), "PROPOSED "+vmMAC) {
		t.Errorf("the VM booted without the relayed power.setPower or the MAC proposal")
	}

	// Another tenant's host on the same segment, with a lease of its own from the site
	// (ISC dhclient), names the VM's MAC, which it saw in its broadcasts: it gets what a
	// machine without an entry gets, not the VM's token, and bcd site logs it.
	beta := netns.New(t, "beta")
	lan.Attach(t, beta, "eth0", "", "02:00:00:00:be:7a")
	ip := dhclient(t, beta, "eth0")
	script := beta.Run(t, "curl", "-sS", "http://10.77.0.1/boot/"+strings.ReplaceAll(vmMAC, ":", "-")+".ipxe")
	if strings.Contains(script, "bc.token") || strings.Contains(script, "kernel") || !strings.Contains(script, "\nsleep ") {
		t.Errorf("the VM's script as %s got it:\n%s", ip, script)
	}
	testkit.WaitFor(t, "bcd site's warning of the stranger's request", 10*time.Second, 100*time.Millisecond, func() bool {
		return strings.Contains(out.String(), "does not hold") && strings.Contains(out.String(), "client="+ip)
	})
}

// dhclientScript configures the address dhclient binds, and nothing else of the host.
const dhclientScript = `#!/bin/sh
[ "$reason" = BOUND ] && ip addr add "$new_ip_address/24" dev "$interface"
exit 0
`

// dhclient runs ISC dhclient in ns on ifname until the test ends and returns the address
// it bound.
func dhclient(t *testing.T, ns *netns.NS, ifname string) string {
	t.Helper()
	ns.StartDhclient(t, ifname, dhclientScript)
	var ip string
	testkit.WaitFor(t, "dhclient's lease", 30*time.Second, 100*time.Millisecond, func() bool {
		f := strings.Fields(ns.Run(t, "ip", "-4", "-o", "addr", "show", "dev", ifname))
		for i := range f {
			if f[i] == "inet" && i+1 < len(f) {
				ip, _, _ = strings.Cut(f[i+1], "/")
			}
		}
		return ip != ""
	})
	return ip
}

// runVMHelper is the registry side of TestSiteBootsVM: it starts the site's
// (startSiteSide) with acme's node enrolled by its product UUID, relays the power step,
// pushes the site a ramdisk entry for the MAC discovery proposes, then waits for SIGINT.
func runVMHelper(ctx context.Context, spec helperSpec) error {
	var node store.Node
	side, err := startSiteSide(ctx, spec.Work, spec.BCD, func(tx *store.Tx) (err error) {
		node, err = tx.CreateNode(store.Node{Tenant: "acme", Pool: "vms", ProductUUID: vmUUID})
		return err
	}, map[string]any{"ramdiskDir": spec.Ramdisk, "retryInterval": "2s"})
	if err != nil {
		return err
	}
	defer side.close()
	st, ep := side.st, side.ep

	// Power the VM on through the site; it boots without an entry and is discovered.
	qmp, _ := json.Marshal(map[string]any{"address": spec.QMP, "options": map[string]string{"pollInterval": "100ms"}})
	payload, _ := json.Marshal(proto.SiteCommand{Node: node.ID, Drivers: map[string]proto.DriverBinding{"power": {Driver: "qmp", Config: qmp}},
		Input: json.RawMessage(`{"action":"on"}`)})
	if _, err := ep.Relay(ctx, "rack-a", proto.RoleSite, proto.Command{ID: "vm-1-power-on", Kind: "power.setPower", Payload: payload}); err != nil {
		return fmt.Errorf("relayed power.setPower: %w", err)
	}
	fmt.Println("POWERED-ON")
	var proposal *store.MACProposal
	for proposal == nil {
		if ctx.Err() != nil {
			return fmt.Errorf("no MAC proposal for node %s", node.ID)
		}
		time.Sleep(250 * time.Millisecond)
		st.View(func(tx *store.Tx) error {
			n, err := tx.Node(node.ID)
			proposal = n.MACProposal
			return err
		})
	}
	fmt.Println("PROPOSED", proposal.MAC)

	// The registry gives the discovered MAC a ramdisk entry; the waiting VM boots it.
	var pushed proto.NodeSpec
	err = st.Update(func(tx *store.Tx) error {
		spec, err := tx.NodeSpec("rack-a")
		if err != nil {
			return err
		}
		spec.Site.BootEntries = []proto.BootEntry{{Node: node.ID, MACs: []string{proposal.MAC}, ProductUUID: vmUUID, Kind: proto.BootRamdisk,
			Ramdisk: &proto.RamdiskBoot{Token: "bcj_vm.token", Registry: "https://registry.test:7443",
				Pins: []string{"sha256/AAAA", "sha256/BBBB", "sha256/CCCC"}, Args: []string{"bc.node=vm-1"}}}}
		pushed, err = tx.SetNodeSpec(spec)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Println("PUSHED generation", pushed.Generation)
	untilInterrupted()
	return nil
}

// siteSide is the registry side of a site in a network namespace: a store, the site
// service keeping the site agent's NodeSpec and an agent endpoint, with `bcd site`
// connected to it.
type siteSide struct {
	st    *store.Store
	ep    *agents.Endpoint
	close func()
}

// startSiteSide opens a store in work with tenant acme, site rack-a and acme's pool vms
// there, then what fill writes; starts the site service and an agent endpoint over it
// until ctx ends, writes the site's bcd config dir with a certificate of a test CA, and
// starts bcd (the binary) site, authoritative on eth0 at 10.77.0.1 over the range
// 10.77.0.100-10.77.0.119, with the further boot settings boot.
func startSiteSide(ctx context.Context, work, bcd string, fill func(tx *store.Tx) error, boot map[string]any) (side siteSide, err error) {
	log := slog.New(slog.NewTextHandler(os.Stdout, nil))
	ca, err := testkit.NewCA()
	if err != nil {
		return side, err
	}
	serverCert, err := ca.ServerCertificate()
	if err != nil {
		return side, err
	}
	if side.st, err = store.Open(filepath.Join(work, "registry"), store.Options{}); err != nil {
		return side, err
	}
	closers := []func(){func() { side.st.Close() }}
	side.close = func() {
		slices.Reverse(closers)
		for _, c := range closers {
			c()
		}
	}
	defer func() {
		if err != nil {
			side.close()
		}
	}()
	err = side.st.Update(func(tx *store.Tx) (err error) {
		if _, err = tx.CreateTenant("acme"); err == nil {
			_, err = tx.CreateSite("rack-a")
		}
		if err == nil {
			_, err = tx.CreatePool(store.Pool{Tenant: "acme", Name: "vms", Site: "rack-a"})
		}
		if err == nil {
			err = fill(tx)
		}
		return err
	})
	if err != nil {
		return side, err
	}
	sites := site.New(site.Config{Store: side.st, Log: log})
	go sites.Run(ctx)
	if side.ep, err = agents.Start(agents.Config{Listen: "127.0.0.1:0", Certificate: serverCert, AgentCAs: ca.Pool(), Store: side.st, Log: log,
		OnInventory: sites.Inventory}); err != nil {
		return side, err
	}
	closers = append(closers, func() { side.ep.Close() })
	confDir := filepath.Join(work, "bcd")
	if err := writeSiteIdentity(ca, confDir, side.ep.Addr().String()); err != nil {
		return side, err
	}
	bootCfg := map[string]any{"interface": "eth0", "mode": "authoritative", "serverIP": "10.77.0.1",
		"subnet": "10.77.0.0/24", "range": map[string]string{"start": "10.77.0.100", "end": "10.77.0.119"},
		"leaseFile": filepath.Join(work, "leases.db")}
	maps.Copy(bootCfg, boot)
	cfg := map[string]any{
		"version": 1, "configDir": confDir, "stateDir": filepath.Join(work, "state"), "boot": bootCfg,
		"ramdisk": map[string]any{"args": []string{"console=ttyS0", "panic=-1"}},
		"cache":   map[string]any{"dir": filepath.Join(work, "cache")},
	}
	data, _ := json.Marshal(cfg)
	siteConfig := filepath.Join(work, "site.json")
	if err := os.WriteFile(siteConfig, data, 0o600); err != nil {
		return side, err
	}
	bcdSite := exec.Command(bcd, "site", "--config", siteConfig)
	bcdSite.Stdout, bcdSite.Stderr = os.Stdout, os.Stdout
	if err := bcdSite.Start(); err != nil {
		return side, err
	}
	closers = append(closers, func() { bcdSite.Process.Signal(os.Interrupt); bcdSite.Wait() })
	return side, nil
}

// writeSiteIdentity writes a joined site agent's config dir for node rack-a, whose
// certificate comes from ca, as `bcd join --role site` would.
func writeSiteIdentity(ca *testkit.CA, dir, endpoint string) error {
	cert, err := ca.AgentCertificate("rack-a", "site")
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return err
	}
	caPEM, _, err := ca.PEM()
	if err != nil {
		return err
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	pin, err := joinwire.Pin(leaf.PublicKey)
	if err != nil {
		return err
	}
	return bcdconf.Write(dir, bcdconf.Bundle{
		Config: bcdconf.Config{Version: bcdconf.Version, Server: "https://127.0.0.1:7443", AgentEndpoint: endpoint,
			NodeID: "rack-a", Role: "site", Site: "rack-a", ServingCAPin: pin, JoinSigningPin: pin, JoinEncryptionPin: pin},
		Key:               pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Certificate:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		AgentCA:           caPEM,
		ServingCA:         caPEM,
		JoinEncryptionKey: []byte("{}"),
	})
}

// startVM starts a VM held off (-S) that boots from its e1000 NIC on the segment, with
// its QMP socket at qmpSock, and returns the file its serial console goes to.
func startVM(t *testing.T, lan *netns.LAN, qmpSock string) string {
	t.Helper()
	return lan.StartVM(t, qmpSock, "-S", "-no-shutdown", "-m", "256", "-boot", "order=n", "-uuid", vmUUID,
		"-device", "e1000,id=nic0,netdev=n0,romfile="+vmROM+",mac="+vmMAC)
}
