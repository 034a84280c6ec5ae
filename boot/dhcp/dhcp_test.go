package dhcp

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot/lease"
	"github.com/better-compute/better-compute/clock"
	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

var (
	mac      = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	serverIP = net.IPv4(10, 9, 0, 1).To4()
	boot     = Boot{
		Files:      Files{BIOS: "undionly.kpxe", UEFI: "snponly.efi", ARM64: "ipxe-arm64.efi"},
		TFTPServer: serverIP,
		HTTPBase:   "http://10.9.0.1",
	}
	uuid = []byte{0, 0x78, 0x56, 0x34, 0x12, 0x34, 0x12, 0x78, 0x56, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0}
)

// client is the kind of request a test sends.
type client struct {
	arch       *iana.Arch
	vendor     string
	ipxe       bool
	uuid       bool
	msg        dhcpv4.MessageType
	requested  net.IP
	serverID   net.IP
	clientAddr net.IP
}

func archp(a iana.Arch) *iana.Arch { return &a }

func (c client) packet(t testing.TB) *dhcpv4.DHCPv4 {
	t.Helper()
	mods := []dhcpv4.Modifier{dhcpv4.WithMessageType(c.msg), dhcpv4.WithHwAddr(mac)}
	if c.arch != nil {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClientArch(*c.arch)))
	}
	if c.vendor != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClassIdentifier(c.vendor)))
	}
	if c.ipxe {
		mods = append(mods, dhcpv4.WithUserClass("iPXE", false))
	}
	if c.uuid {
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, uuid))
	}
	if c.requested != nil {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(c.requested)))
	}
	if c.serverID != nil {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(c.serverID)))
	}
	if c.clientAddr != nil {
		mods = append(mods, dhcpv4.WithClientIP(c.clientAddr))
	}
	p, err := dhcpv4.New(mods...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const pxe = "PXEClient:Arch:00000:UNDI:002001"

func TestChoose(t *testing.T) {
	cases := map[string]struct {
		c    client
		want Answer
		none bool
	}{
		"BIOS":                 {c: client{arch: archp(iana.INTEL_X86PC), vendor: pxe}, want: Answer{File: "undionly.kpxe", TFTP: true, VendorClass: "PXEClient"}},
		"UEFI x86-64":          {c: client{arch: archp(iana.EFI_X86_64), vendor: "PXEClient:Arch:00007"}, want: Answer{File: "snponly.efi", TFTP: true, VendorClass: "PXEClient"}},
		"UEFI byte code":       {c: client{arch: archp(iana.EFI_BC), vendor: "PXEClient:Arch:00009"}, want: Answer{File: "snponly.efi", TFTP: true, VendorClass: "PXEClient"}},
		"arm64":                {c: client{arch: archp(iana.EFI_ARM64), vendor: "PXEClient:Arch:00011"}, want: Answer{File: "ipxe-arm64.efi", TFTP: true, VendorClass: "PXEClient"}},
		"UEFI HTTP boot":       {c: client{arch: archp(iana.EFI_X86_64_HTTP), vendor: "HTTPClient:Arch:00016"}, want: Answer{File: "http://10.9.0.1/ipxe/snponly.efi", VendorClass: "HTTPClient"}},
		"iPXE":                 {c: client{arch: archp(iana.INTEL_X86PC), vendor: pxe, ipxe: true}, want: Answer{File: "http://10.9.0.1/boot/52-54-00-12-34-56.ipxe", VendorClass: "PXEClient"}},
		"iPXE without PXE":     {c: client{ipxe: true}, want: Answer{File: "http://10.9.0.1/boot/52-54-00-12-34-56.ipxe"}},
		"plain client":         {c: client{}, none: true},
		"PXE without arch":     {c: client{vendor: pxe}, none: true},
		"EFI IA32 unsupported": {c: client{arch: archp(iana.EFI_IA32), vendor: "PXEClient:Arch:00006"}, none: true},
		"HTTP boot BIOS arch":  {c: client{arch: archp(iana.INTEL_X86PC_HTTP), vendor: "HTTPClient"}, none: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.c.msg = dhcpv4.MessageTypeDiscover
			c, ok := Classify(tc.c.packet(t))
			if !ok {
				t.Fatal("not classified")
			}
			got, ok := boot.Choose(c)
			if ok == tc.none {
				t.Fatalf("answer %v, want none: %v", ok, tc.none)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Error(diff)
			}
		})
	}
	// A machine that boots under Secure Boot gets shim where others get iPXE, and
	// nothing by HTTP boot or without shim; its other architectures are as before.
	secure := boot
	secure.Files.Shim = "secureboot/shimx64.efi"
	secure.SecureBoot = func(mac net.HardwareAddr) bool { return mac.String() == "52:54:00:12:34:56" }
	noShim := secure
	noShim.Files.Shim = ""
	for _, sc := range []struct {
		boot Boot
		c    client
		want Answer
		none bool
	}{
		{boot: secure, c: client{arch: archp(iana.EFI_X86_64), vendor: "PXEClient:Arch:00007"}, want: Answer{File: "secureboot/shimx64.efi", TFTP: true, VendorClass: "PXEClient"}},
		{boot: secure, c: client{arch: archp(iana.EFI_BC), vendor: "PXEClient:Arch:00009"}, want: Answer{File: "secureboot/shimx64.efi", TFTP: true, VendorClass: "PXEClient"}},
		{boot: secure, c: client{arch: archp(iana.INTEL_X86PC), vendor: pxe}, want: Answer{File: "undionly.kpxe", TFTP: true, VendorClass: "PXEClient"}},
		{boot: secure, c: client{arch: archp(iana.EFI_X86_64_HTTP), vendor: "HTTPClient:Arch:00016"}, none: true},
		{boot: noShim, c: client{arch: archp(iana.EFI_X86_64), vendor: "PXEClient:Arch:00007"}, none: true},
	} {
		sc.c.msg = dhcpv4.MessageTypeDiscover
		c, _ := Classify(sc.c.packet(t))
		got, ok := sc.boot.Choose(c)
		if ok == sc.none || got != sc.want {
			t.Errorf("Secure Boot machine, arch %v, shim %q: got %+v (%v), want %+v (none: %v)", c.Arch, sc.boot.Files.Shim, got, ok, sc.want, sc.none)
		}
	}
	// Only UEFI firmware's answer looks up the machine's Secure Boot: a BIOS, an iPXE or
	// a plain request costs no look-up.
	looked := 0
	counting := secure
	counting.SecureBoot = func(net.HardwareAddr) bool { looked++; return false }
	for _, cl := range []client{{arch: archp(iana.INTEL_X86PC), vendor: pxe}, {ipxe: true, arch: archp(iana.EFI_X86_64)}, {}} {
		cl.msg = dhcpv4.MessageTypeDiscover
		c, _ := Classify(cl.packet(t))
		counting.Choose(c)
	}
	if looked != 0 {
		t.Errorf("%d Secure Boot look-ups for requests whose answer does not depend on it, want 0", looked)
	}
	noARM := boot
	noARM.Files.ARM64 = ""
	c, _ := Classify(client{arch: archp(iana.EFI_ARM64), vendor: "PXEClient", msg: dhcpv4.MessageTypeDiscover}.packet(t))
	if a, ok := noARM.Choose(c); ok {
		t.Errorf("arm64 without a binary answered %+v", a)
	}
}

// TestClassifyRefusesImpossibleMACs: a request from a group or all-zero hardware
// address is no machine's and is not answered or discovered.
func TestClassifyRefusesImpossibleMACs(t *testing.T) {
	for _, m := range []string{"ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01", "33:33:00:00:00:01", "00:00:00:00:00:00"} {
		req := client{arch: archp(iana.INTEL_X86PC), vendor: pxe, msg: dhcpv4.MessageTypeDiscover}.packet(t)
		req.ClientHWAddr, _ = net.ParseMAC(m)
		if _, ok := Classify(req); ok {
			t.Errorf("%s classified as a client", m)
		}
	}
	if !MachineMAC(mac) {
		t.Errorf("%s refused", mac)
	}
}

func TestClassifyUUID(t *testing.T) {
	c, _ := Classify(client{uuid: true, msg: dhcpv4.MessageTypeDiscover}.packet(t))
	if diff := cmp.Diff("12345678-1234-5678-1234-56789abcdef0", c.UUID); diff != "" {
		t.Error(diff)
	}
}

// summary is the part of a reply the tests compare.
type summary struct {
	Type, YourIP, ServerIP, File, Option67, Vendor, Option66 string
	ServerID                                                 string
	UUID                                                     bool
}

func summarize(r *dhcpv4.DHCPv4) summary {
	s := summary{Type: r.MessageType().String(), YourIP: r.YourIPAddr.String(), ServerIP: r.ServerIPAddr.String(),
		File: r.BootFileName, Option67: r.BootFileNameOption(), Vendor: r.ClassIdentifier(), Option66: r.TFTPServerName(),
		UUID: r.GetOneOption(dhcpv4.OptionClientMachineIdentifier) != nil}
	if id := r.ServerIdentifier(); id != nil {
		s.ServerID = id.String()
	}
	return s
}

func TestProxy(t *testing.T) {
	cases := map[string]struct {
		c    client
		want *summary
		// bootServer sends the request to port 4011 (HandleBootServer), not 67.
		bootServer bool
	}{
		"BIOS discover": {c: client{arch: archp(iana.INTEL_X86PC), vendor: pxe, uuid: true, msg: dhcpv4.MessageTypeDiscover},
			want: &summary{Type: "OFFER", YourIP: "0.0.0.0", ServerIP: "10.9.0.1", File: "undionly.kpxe", Option67: "undionly.kpxe", Vendor: "PXEClient", Option66: "10.9.0.1", ServerID: "10.9.0.1", UUID: true}},
		"UEFI request on 4011": {bootServer: true, c: client{arch: archp(iana.EFI_X86_64), vendor: "PXEClient:Arch:00007", msg: dhcpv4.MessageTypeRequest, clientAddr: net.IPv4(10, 9, 0, 50)},
			want: &summary{Type: "ACK", YourIP: "0.0.0.0", ServerIP: "10.9.0.1", File: "snponly.efi", Option67: "snponly.efi", Vendor: "PXEClient", Option66: "10.9.0.1", ServerID: "10.9.0.1"}},
		"iPXE discover": {c: client{arch: archp(iana.INTEL_X86PC), vendor: pxe, ipxe: true, msg: dhcpv4.MessageTypeDiscover},
			want: &summary{Type: "OFFER", YourIP: "0.0.0.0", ServerIP: "10.9.0.1", File: "http://10.9.0.1/boot/52-54-00-12-34-56.ipxe", Option67: "http://10.9.0.1/boot/52-54-00-12-34-56.ipxe", Vendor: "PXEClient", ServerID: "10.9.0.1"}},
		"request naming the proxy": {c: client{arch: archp(iana.EFI_X86_64), vendor: "PXEClient:Arch:00007", msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 50), serverID: serverIP},
			want: &summary{Type: "ACK", YourIP: "0.0.0.0", ServerIP: "10.9.0.1", File: "snponly.efi", Option67: "snponly.efi", Vendor: "PXEClient", Option66: "10.9.0.1", ServerID: "10.9.0.1"}},
		"request selecting another server":         {c: client{arch: archp(iana.EFI_X86_64), vendor: "PXEClient:Arch:00007", msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 50), serverID: net.IPv4(10, 9, 0, 2)}},
		"request selecting another server on 4011": {bootServer: true, c: client{arch: archp(iana.EFI_X86_64), vendor: "PXEClient:Arch:00007", msg: dhcpv4.MessageTypeRequest, clientAddr: net.IPv4(10, 9, 0, 50), serverID: net.IPv4(10, 9, 0, 2)}},
		"request without a server on 67":           {c: client{arch: archp(iana.EFI_X86_64), vendor: "PXEClient:Arch:00007", msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 50)}},
		"plain client ignored":                     {c: client{msg: dhcpv4.MessageTypeDiscover}},
		"iPXE without PXEClient":                   {c: client{ipxe: true, msg: dhcpv4.MessageTypeDiscover}},
		"release ignored":                          {c: client{arch: archp(iana.INTEL_X86PC), vendor: pxe, msg: dhcpv4.MessageTypeRelease}},
		"unknown arch ignored":                     {c: client{arch: archp(iana.EFI_IA32), vendor: pxe, msg: dhcpv4.MessageTypeDiscover}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var seen []Client
			p := Proxy{ServerIP: serverIP, Boot: boot, Seen: func(c Client) { seen = append(seen, c) }}
			handle := p.Handle
			if tc.bootServer {
				handle = p.HandleBootServer
			}
			resp, ok := handle(tc.c.packet(t))
			if tc.want == nil {
				if ok {
					t.Fatalf("answered %s", resp.Summary())
				}
				return
			}
			if !ok {
				t.Fatal("no answer")
			}
			if diff := cmp.Diff(*tc.want, summarize(resp)); diff != "" {
				t.Error(diff)
			}
			if len(seen) != 1 {
				t.Errorf("seen %d times, want once", len(seen))
			}
		})
	}
}

func newAuthoritative(t testing.TB) (Authoritative, *lease.Store) {
	t.Helper()
	store, err := lease.Open(filepath.Join(t.TempDir(), "leases.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clk := clock.NewFake(time.Unix(1e9, 0))
	rng := lease.Range{Start: netip.MustParseAddr("10.9.0.100"), End: netip.MustParseAddr("10.9.0.101")}
	pool, err := lease.NewPool(store, rng, nil, time.Hour, clk, lease.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	return Authoritative{ServerIP: serverIP, Subnets: []Subnet{{Prefix: netip.MustParsePrefix("10.9.0.0/24"), Pool: pool, Router: serverIP, Local: true}},
		Boot: boot, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, store
}

// TestNoAckWithoutDurableLease: when the lease can not be written, no DHCPACK goes out.
func TestNoAckWithoutDurableLease(t *testing.T) {
	s, store := newAuthoritative(t)
	if offer, ok := s.Handle(client{msg: dhcpv4.MessageTypeDiscover}.packet(t)); !ok || offer.YourIPAddr.String() != "10.9.0.100" {
		t.Fatalf("offer %v, want 10.9.0.100", offer)
	}
	store.Close()
	req := client{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 100), serverID: serverIP}.packet(t)
	if resp, ok := s.Handle(req); ok {
		t.Fatalf("answered %s with the lease file closed", resp.Summary())
	}
}

func TestAuthoritative(t *testing.T) {
	type step struct {
		c    client
		want *summary
	}
	bios := client{arch: archp(iana.INTEL_X86PC), vendor: pxe}
	with := func(c client, f func(*client)) client { f(&c); return c }
	nak := summary{Type: "NAK", YourIP: "0.0.0.0", ServerIP: "0.0.0.0", ServerID: "10.9.0.1"}
	ack100 := summary{Type: "ACK", YourIP: "10.9.0.100", ServerIP: "10.9.0.1", ServerID: "10.9.0.1"}
	ack101 := summary{Type: "ACK", YourIP: "10.9.0.101", ServerIP: "10.9.0.1", ServerID: "10.9.0.1"}
	cases := map[string][]step{
		"PXE exchange": {
			{c: with(bios, func(c *client) { c.msg = dhcpv4.MessageTypeDiscover }),
				want: &summary{Type: "OFFER", YourIP: "10.9.0.100", ServerIP: "10.9.0.1", File: "undionly.kpxe", Option67: "undionly.kpxe", Vendor: "PXEClient", Option66: "10.9.0.1", ServerID: "10.9.0.1"}},
			{c: with(bios, func(c *client) {
				c.msg, c.requested, c.serverID = dhcpv4.MessageTypeRequest, net.IPv4(10, 9, 0, 100), serverIP
			}), want: &summary{Type: "ACK", YourIP: "10.9.0.100", ServerIP: "10.9.0.1", File: "undionly.kpxe", Option67: "undionly.kpxe", Vendor: "PXEClient", Option66: "10.9.0.1", ServerID: "10.9.0.1"}},
		},
		"plain client gets no boot file": {
			{c: client{msg: dhcpv4.MessageTypeDiscover}, want: &summary{Type: "OFFER", YourIP: "10.9.0.100", ServerIP: "10.9.0.1", ServerID: "10.9.0.1"}},
		},
		"request for another server's offer": {
			{c: client{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 100), serverID: net.IPv4(10, 9, 0, 2)}},
		},
		"INIT-REBOOT off the subnet's network": {
			{c: client{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 1, 7)}, want: &nak},
		},
		// A renewal is trusted without a record (a lost lease file), and makes one.
		"renewal, then INIT-REBOOT": {
			{c: client{msg: dhcpv4.MessageTypeRequest, clientAddr: net.IPv4(10, 9, 0, 101)}, want: &ack101},
			{c: client{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 101)}, want: &ack101},
		},
		"INIT-REBOOT without a record": {
			{c: client{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 101)}},
		},
		"INIT-REBOOT of another address than the lease": {
			{c: client{msg: dhcpv4.MessageTypeRequest, clientAddr: net.IPv4(10, 9, 0, 100)}, want: &ack100},
			{c: client{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 101)}, want: &nak},
		},
		"INIT-REBOOT of the offer": {
			{c: client{msg: dhcpv4.MessageTypeDiscover}, want: &summary{Type: "OFFER", YourIP: "10.9.0.100", ServerIP: "10.9.0.1", ServerID: "10.9.0.1"}},
			{c: client{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 100)}, want: &ack100},
		},
		"SELECTING an address not offered": {
			{c: client{msg: dhcpv4.MessageTypeDiscover}, want: &summary{Type: "OFFER", YourIP: "10.9.0.100", ServerIP: "10.9.0.1", ServerID: "10.9.0.1"}},
			{c: client{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 101), serverID: serverIP}, want: &nak},
			{c: client{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 100), serverID: serverIP}, want: &ack100},
		},
		"SELECTING without an offer": {
			{c: client{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 100), serverID: serverIP}, want: &nak},
		},
		"request without an address": {
			{c: client{msg: dhcpv4.MessageTypeRequest}},
		},
		"release then decline": {
			{c: client{msg: dhcpv4.MessageTypeRequest, clientAddr: net.IPv4(10, 9, 0, 100)}, want: &ack100},
			{c: client{msg: dhcpv4.MessageTypeRelease, clientAddr: net.IPv4(10, 9, 0, 100)}},
			{c: client{msg: dhcpv4.MessageTypeDecline, requested: net.IPv4(10, 9, 0, 100)}},
		},
		"inform": {
			{c: client{msg: dhcpv4.MessageTypeInform, clientAddr: net.IPv4(10, 9, 0, 77)}, want: &summary{Type: "ACK", YourIP: "0.0.0.0", ServerIP: "10.9.0.1", ServerID: "10.9.0.1"}},
		},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			s, _ := newAuthoritative(t)
			for i, st := range steps {
				resp, ok := s.Handle(st.c.packet(t))
				if st.want == nil {
					if ok {
						t.Fatalf("step %d answered %s", i, resp.Summary())
					}
					continue
				}
				if !ok {
					t.Fatalf("step %d: no answer", i)
				}
				if diff := cmp.Diff(*st.want, summarize(resp)); diff != "" {
					t.Errorf("step %d: %s", i, diff)
				}
			}
		})
	}
}

func TestDestination(t *testing.T) {
	peer := &net.UDPAddr{IP: net.IPv4(10, 9, 0, 50), Port: 68}
	zero := &net.UDPAddr{IP: net.IPv4zero, Port: 68}
	cases := map[string]struct {
		req  client
		gw   net.IP
		nak  bool
		peer *net.UDPAddr
		want string
	}{
		"new client":         {req: client{msg: dhcpv4.MessageTypeDiscover}, peer: zero, want: "255.255.255.255:68"},
		"renewal":            {req: client{msg: dhcpv4.MessageTypeRequest, clientAddr: peer.IP}, peer: peer, want: "10.9.0.50:68"},
		"relayed":            {req: client{msg: dhcpv4.MessageTypeDiscover}, gw: net.IPv4(10, 8, 0, 1), peer: peer, want: "10.8.0.1:67"},
		"NAK is broadcast":   {req: client{msg: dhcpv4.MessageTypeRequest, clientAddr: peer.IP}, nak: true, peer: peer, want: "255.255.255.255:68"},
		"proxy on port 4011": {req: client{msg: dhcpv4.MessageTypeRequest, clientAddr: peer.IP}, peer: &net.UDPAddr{IP: peer.IP, Port: 4011}, want: "10.9.0.50:4011"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			req := c.req.packet(t)
			req.GatewayIPAddr = c.gw
			mt := dhcpv4.MessageTypeAck
			if c.nak {
				mt = dhcpv4.MessageTypeNak
			}
			resp := reply(req, mt, serverIP)
			if diff := cmp.Diff(c.want, Destination(req, resp, c.peer).String()); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// FuzzHandle feeds any packet to both handlers: they never panic, and what they answer
// can be sent.
func FuzzHandle(f *testing.F) {
	for _, c := range []client{
		{arch: archp(iana.INTEL_X86PC), vendor: pxe, uuid: true, msg: dhcpv4.MessageTypeDiscover},
		{arch: archp(iana.EFI_X86_64_HTTP), vendor: "HTTPClient", msg: dhcpv4.MessageTypeDiscover},
		{ipxe: true, msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 100)},
		{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 0, 100), serverID: serverIP},
		{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 9, 1, 7)},
		{msg: dhcpv4.MessageTypeRequest, clientAddr: net.IPv4(10, 9, 0, 101)},
		{msg: dhcpv4.MessageTypeRequest, clientAddr: net.IPv4(10, 9, 0, 101), requested: net.IPv4(10, 9, 0, 100)},
		{msg: dhcpv4.MessageTypeRelease, clientAddr: net.IPv4(10, 9, 0, 100)},
		{msg: dhcpv4.MessageTypeDecline, requested: net.IPv4(10, 9, 0, 101)},
	} {
		f.Add(c.packet(f).ToBytes())
	}
	relayed := client{arch: archp(iana.EFI_X86_64), vendor: "PXEClient:Arch:00007", msg: dhcpv4.MessageTypeDiscover}.packet(f)
	relayed.GatewayIPAddr = net.IPv4(10, 8, 0, 1)
	relayed.UpdateOption(dhcpv4.OptRelayAgentInfo(dhcpv4.OptGeneric(dhcpv4.LinkSelectionSubOption, []byte{10, 8, 0, 0})))
	relayed.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionSubnetSelection, []byte{10, 8, 0, 0}))
	f.Add(relayed.ToBytes())
	auth, store := newAuthoritative(f)
	routed, err := lease.NewPool(store, lease.Range{Start: netip.MustParseAddr("10.8.0.10"), End: netip.MustParseAddr("10.8.0.20")}, nil, time.Hour, clock.NewFake(time.Unix(1e9, 0)), lease.Policy{})
	if err != nil {
		f.Fatal(err)
	}
	auth.Subnets = append(auth.Subnets, Subnet{Prefix: netip.MustParsePrefix("10.8.0.0/24"), Pool: routed})
	proxy := Proxy{ServerIP: serverIP, Boot: boot, Seen: func(Client) {}}
	peer := &net.UDPAddr{IP: net.IPv4zero, Port: 68}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := dhcpv4.FromBytes(b)
		if err != nil {
			return
		}
		for _, h := range []Handler{auth.Handle, proxy.Handle, proxy.HandleBootServer} {
			if resp, ok := h(req); ok {
				if _, err := dhcpv4.FromBytes(resp.ToBytes()); err != nil {
					t.Fatalf("reply does not parse: %v", err)
				}
				Destination(req, resp, peer)
			}
		}
	})
}

// TestRelayed: with a routed subnet beside the local one, a relayed request is answered
// from the subnet of its link (option 82 sub-option 5, option 118, giaddr, in that
// order), with that subnet's address, mask, router and lease time, and the relay agent
// option echoed; a request of a link served by no subnet is not answered.
func TestRelayed(t *testing.T) {
	s, store := newAuthoritative(t)
	clk := clock.NewFake(time.Unix(1e9, 0))
	pool, err := lease.NewPool(store, lease.Range{Start: netip.MustParseAddr("10.8.0.100"), End: netip.MustParseAddr("10.8.0.120")},
		[]netip.Addr{netip.MustParseAddr("10.8.0.1")}, 30*time.Minute, clk, lease.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	s.Subnets = append(s.Subnets, Subnet{Prefix: netip.MustParsePrefix("10.8.0.0/23"), Pool: pool, Router: net.IPv4(10, 8, 0, 1)})
	linkSel := func(ip net.IP) dhcpv4.Modifier {
		return dhcpv4.WithOption(dhcpv4.OptRelayAgentInfo(dhcpv4.OptGeneric(dhcpv4.LinkSelectionSubOption, ip.To4()),
			dhcpv4.OptGeneric(dhcpv4.AgentCircuitIDSubOption, []byte("port7"))))
	}
	type got struct {
		// Subnet is the one of the two subnets that holds yiaddr.
		Type, Subnet, Mask, Router, Giaddr string
		Lease                              time.Duration
		Agent                              bool
	}
	cases := []struct {
		name string
		gw   net.IP
		mods []dhcpv4.Modifier
		msg  dhcpv4.MessageType
		ci   net.IP
		want *got
		// again: the client of the case before
		again bool
	}{
		{name: "relayed from the routed subnet", gw: net.IPv4(10, 8, 0, 1), msg: dhcpv4.MessageTypeDiscover,
			want: &got{"OFFER", "10.8.0.0/23", "255.255.254.0", "10.8.0.1", "10.8.0.1", 30 * time.Minute, false}},
		{name: "relayed from a link nobody serves", gw: net.IPv4(10, 99, 0, 1), msg: dhcpv4.MessageTypeDiscover},
		{name: "link selection names the routed subnet", gw: net.IPv4(10, 7, 0, 1), mods: []dhcpv4.Modifier{linkSel(net.IPv4(10, 8, 1, 0))},
			msg: dhcpv4.MessageTypeDiscover, want: &got{"OFFER", "10.8.0.0/23", "255.255.254.0", "10.8.0.1", "10.7.0.1", 30 * time.Minute, true}},
		{name: "link selection before giaddr", gw: net.IPv4(10, 8, 0, 1), mods: []dhcpv4.Modifier{linkSel(net.IPv4(10, 99, 0, 0))},
			msg: dhcpv4.MessageTypeDiscover},
		{name: "subnet selection", gw: net.IPv4(10, 7, 0, 1), mods: []dhcpv4.Modifier{dhcpv4.WithGeneric(dhcpv4.OptionSubnetSelection, []byte{10, 8, 0, 9})},
			msg: dhcpv4.MessageTypeDiscover, want: &got{"OFFER", "10.8.0.0/23", "255.255.254.0", "10.8.0.1", "10.7.0.1", 30 * time.Minute, false}},
		{name: "subnet selection without a relay is not looked at", mods: []dhcpv4.Modifier{dhcpv4.WithGeneric(dhcpv4.OptionSubnetSelection, []byte{10, 8, 0, 9})},
			msg: dhcpv4.MessageTypeDiscover, want: &got{"OFFER", "10.9.0.0/24", "255.255.255.0", "10.9.0.1", "0.0.0.0", time.Hour, false}},
		{name: "relayed discover asking for an address", gw: net.IPv4(10, 8, 0, 1), mods: []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 8, 0, 110)))},
			msg: dhcpv4.MessageTypeDiscover, want: &got{"OFFER", "10.8.0.0/23", "255.255.254.0", "10.8.0.1", "10.8.0.1", 30 * time.Minute, false}},
		{name: "relayed request", gw: net.IPv4(10, 8, 0, 1), mods: []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 8, 0, 110)))},
			msg: dhcpv4.MessageTypeRequest, again: true, want: &got{"ACK", "10.8.0.0/23", "255.255.254.0", "10.8.0.1", "10.8.0.1", 30 * time.Minute, false}},
		{name: "renewal straight to the server", ci: net.IPv4(10, 8, 0, 110), msg: dhcpv4.MessageTypeRequest, again: true,
			want: &got{"ACK", "10.8.0.0/23", "255.255.254.0", "10.8.0.1", "0.0.0.0", 30 * time.Minute, false}},
		{name: "renewal of an address nobody serves", ci: net.IPv4(10, 99, 0, 5), msg: dhcpv4.MessageTypeRequest},
		{name: "local client", msg: dhcpv4.MessageTypeDiscover, want: &got{"OFFER", "10.9.0.0/24", "255.255.255.0", "10.9.0.1", "0.0.0.0", time.Hour, false}},
	}
	hw := net.HardwareAddr{0x52, 0x54, 0, 0, 1, 0}
	for _, c := range cases {
		if !c.again {
			hw = append(net.HardwareAddr(nil), hw...)
			hw[5]++
		}
		t.Run(c.name, func(t *testing.T) {
			mods := append([]dhcpv4.Modifier{dhcpv4.WithMessageType(c.msg), dhcpv4.WithHwAddr(hw)}, c.mods...)
			if c.gw != nil {
				mods = append(mods, dhcpv4.WithGatewayIP(c.gw))
			}
			if c.ci != nil {
				mods = append(mods, dhcpv4.WithClientIP(c.ci))
			}
			req, err := dhcpv4.New(mods...)
			if err != nil {
				t.Fatal(err)
			}
			resp, ok := s.Handle(req)
			if c.want == nil {
				if ok {
					t.Fatalf("answered %s", resp.Summary())
				}
				return
			}
			if !ok {
				t.Fatal("no answer")
			}
			g := got{Type: resp.MessageType().String(), Subnet: resp.YourIPAddr.String(), Mask: net.IP(resp.SubnetMask()).String(),
				Giaddr: resp.GatewayIPAddr.String(), Lease: resp.IPAddressLeaseTime(0), Agent: resp.RelayAgentInfo() != nil}
			for _, p := range []string{"10.8.0.0/23", "10.9.0.0/24"} {
				if netip.MustParsePrefix(p).Contains(addr(resp.YourIPAddr)) {
					g.Subnet = p
				}
			}
			if r := resp.Router(); len(r) == 1 {
				g.Router = r[0].String()
			}
			if diff := cmp.Diff(*c.want, g); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
			if c.gw != nil {
				if d := Destination(req, resp, &net.UDPAddr{IP: c.gw, Port: 67}).String(); d != c.gw.String()+":67" {
					t.Errorf("sent to %s, want the relay at %s:67", d, c.gw)
				}
			}
		})
	}
}

// TestExhaustedPoolIsTold: a DHCPDISCOVER that finds every address of its range leased
// goes unanswered, and Exhausted is told of it (bcd site counts it); a discover that
// gets an offer is not.
func TestExhaustedPoolIsTold(t *testing.T) {
	s, _ := newAuthoritative(t)
	exhausted := 0
	s.Exhausted = func() { exhausted++ }
	packet := func(last byte, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
		p, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(net.HardwareAddr{0x52, 0x54, 0, 0, 1, last})}, mods...)...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i, ip := range []net.IP{net.IPv4(10, 9, 0, 100), net.IPv4(10, 9, 0, 101)} {
		if _, ok := s.Handle(packet(byte(i), dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover))); !ok {
			t.Fatalf("no offer for client %d", i)
		}
		if _, ok := s.Handle(packet(byte(i), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip)))); !ok {
			t.Fatalf("no ack of %s", ip)
		}
	}
	if exhausted != 0 {
		t.Fatalf("told of %d exhausted pools while it had addresses", exhausted)
	}
	if resp, ok := s.Handle(packet(9, dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover))); ok {
		t.Fatalf("a third client got %s from a range of two", resp.Summary())
	}
	if exhausted != 1 {
		t.Errorf("told of %d exhausted pools, want 1", exhausted)
	}
}

// TestUnknownShareIsTold: in a range of two with half for clients the site does not
// know, one such client is leased an address for the short lease time; a second gets no
// offer, which Refused is told of (not Exhausted), and a DHCPNAK for a renewal of the
// free address; a known client is offered it, for the long lease time.
func TestUnknownShareIsTold(t *testing.T) {
	s, store := newAuthoritative(t)
	known := net.HardwareAddr{0x52, 0x54, 0, 0, 2, 1}
	pool, err := lease.NewPool(store, lease.Range{Start: netip.MustParseAddr("10.9.0.100"), End: netip.MustParseAddr("10.9.0.101")}, nil, time.Hour,
		clock.NewFake(time.Unix(1e9, 0)), lease.Policy{Known: func(mac string) bool { return mac == known.String() }, UnknownShare: 0.5, UnknownTTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s.Subnets[0].Pool = pool
	exhausted, refused := 0, 0
	s.Exhausted, s.Refused = func() { exhausted++ }, func() { refused++ }
	packet := func(mac net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
		p, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(mac)}, mods...)...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	discover, request := dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest)
	first, second := net.HardwareAddr{0x52, 0x54, 0, 0, 1, 1}, net.HardwareAddr{0x52, 0x54, 0, 0, 1, 2}
	if _, ok := s.Handle(packet(first, discover)); !ok {
		t.Fatal("no offer for the first client not known")
	}
	ack, ok := s.Handle(packet(first, request, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 9, 0, 100)))))
	if !ok || ack.MessageType() != dhcpv4.MessageTypeAck || ack.IPAddressLeaseTime(0) != 10*time.Minute {
		t.Fatalf("first client not known: %v, want a DHCPACK of 10m", ack)
	}
	if resp, ok := s.Handle(packet(second, discover)); ok {
		t.Fatalf("the second client not known got %s beyond the share", resp.Summary())
	}
	if refused != 1 || exhausted != 0 {
		t.Errorf("told of %d refusals and %d exhausted pools, want 1 and 0", refused, exhausted)
	}
	nak, ok := s.Handle(packet(second, request, dhcpv4.WithClientIP(net.IPv4(10, 9, 0, 101))))
	if !ok || nak.MessageType() != dhcpv4.MessageTypeNak {
		t.Errorf("renewal of the free address beyond the share: %v, want a DHCPNAK", nak)
	}
	offer, ok := s.Handle(packet(known, discover))
	if !ok || !offer.YourIPAddr.Equal(net.IPv4(10, 9, 0, 101)) || offer.IPAddressLeaseTime(0) != time.Hour {
		t.Errorf("known client: %v, want an offer of 10.9.0.101 for an hour", offer)
	}
}

// TestReplyIsTheLibrarys checks that reply builds, byte for byte, the reply
// dhcpv4.NewReplyFromRequest builds (whose random transaction id the request's replaces),
// for a plain, a relayed and a client-identified request.
func TestReplyIsTheLibrarys(t *testing.T) {
	plain := client{arch: archp(iana.INTEL_X86PC), vendor: pxe, uuid: true, msg: dhcpv4.MessageTypeDiscover}.packet(t)
	relayed := client{msg: dhcpv4.MessageTypeRequest, requested: net.IPv4(10, 8, 0, 9)}.packet(t)
	relayed.GatewayIPAddr = net.IPv4(10, 8, 0, 1)
	relayed.Flags = 0x8000
	relayed.UpdateOption(dhcpv4.OptRelayAgentInfo(dhcpv4.OptGeneric(dhcpv4.LinkSelectionSubOption, []byte{10, 8, 0, 0})))
	relayed.UpdateOption(dhcpv4.OptClientIdentifier([]byte{1, 2, 3, 4, 5, 6, 7}))
	for name, req := range map[string]*dhcpv4.DHCPv4{"plain": plain, "relayed": relayed} {
		for _, mt := range []dhcpv4.MessageType{dhcpv4.MessageTypeOffer, dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak} {
			want, err := dhcpv4.NewReplyFromRequest(req, dhcpv4.WithMessageType(mt), dhcpv4.WithServerIP(serverIP),
				dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverIP)))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want.ToBytes(), reply(req, mt, serverIP).ToBytes()); diff != "" {
				t.Errorf("%s %s: reply differs from the library's (-want +got):\n%s", name, mt, diff)
			}
		}
	}
}
