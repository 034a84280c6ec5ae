package boot

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/iana"
)

// probeSpec is what the PXE probe sends: a DHCPDISCOVER as PXE firmware sends it, whose
// every reply it prints, then optionally a DHCPREQUEST to a proxyDHCP server's port 4011
// as firmware does after it got an address.
type probeSpec struct {
	Interface string
	MAC       string
	Arch      uint16
	// Vendor is option 60; "PXEClient:Arch:<arch>:UNDI:002001" when empty.
	Vendor string
	// IPXE adds user class "iPXE" (option 77).
	IPXE bool
	UUID string
	Wait time.Duration
	// Proxy is the proxyDHCP server's host:4011; empty for no request.
	Proxy     string
	ProxyArch uint16
	// ClientIP is the interface's address, the request's ciaddr.
	ClientIP string
	// Select broadcasts, after the offers, the DHCPREQUEST of a client that took the
	// first offer holding an address: option 54 names that offer's server.
	Select bool
	// Request is the address Select's DHCPREQUEST asks for instead of the offer's.
	Request string
	// Reboot, in place of the DHCPDISCOVER, broadcasts the DHCPREQUEST of a client in
	// INIT-REBOOT asking for this address: option 50, neither option 54 nor ciaddr.
	Reboot string
	// Renew, in place of the DHCPDISCOVER, broadcasts the DHCPREQUEST of a client
	// rebinding this address: ciaddr, neither option 50 nor option 54.
	Renew string
}

// probeReply is one reply the probe received.
type probeReply struct {
	Port     int
	Type     string
	YourIP   string
	ServerIP string
	ServerID string
	File     string
	Vendor   string
}

// probeHelper runs a probe and prints each reply as a JSON line.
func probeHelper(specFile string) int {
	var spec probeSpec
	if err := readSpec(specFile, &spec); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 2
	}
	if err := probe(spec); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 1
	}
	return 0
}

func probe(spec probeSpec) error {
	mac, err := net.ParseMAC(spec.MAC)
	if err != nil {
		return err
	}
	uuid, err := hex.DecodeString(spec.UUID)
	if err != nil {
		return err
	}
	conn, err := server4.NewIPv4UDPConn(spec.Interface, &net.UDPAddr{Port: dhcpv4.ClientPort})
	if err != nil {
		return err
	}
	defer conn.Close()
	pxe := func(t dhcpv4.MessageType, arch uint16, extra ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
		vendor := spec.Vendor
		if vendor == "" {
			vendor = fmt.Sprintf("PXEClient:Arch:%05d:UNDI:002001", arch)
		}
		mods := append([]dhcpv4.Modifier{dhcpv4.WithMessageType(t), dhcpv4.WithHwAddr(mac), dhcpv4.WithBroadcast(true),
			dhcpv4.WithOption(dhcpv4.OptClassIdentifier(vendor)),
			dhcpv4.WithOption(dhcpv4.OptClientArch(iana.Arch(arch))),
			dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, append([]byte{0}, uuid...))}, extra...)
		if spec.IPXE {
			mods = append(mods, dhcpv4.WithUserClass("iPXE", false))
		}
		p, _ := dhcpv4.New(mods...)
		return p
	}
	var disc *dhcpv4.DHCPv4
	switch {
	case spec.Reboot != "":
		disc = pxe(dhcpv4.MessageTypeRequest, spec.Arch, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP(spec.Reboot))))
	case spec.Renew != "":
		disc = pxe(dhcpv4.MessageTypeRequest, spec.Arch, dhcpv4.WithClientIP(net.ParseIP(spec.Renew)))
	default:
		disc = pxe(dhcpv4.MessageTypeDiscover, spec.Arch)
	}
	if _, err := conn.WriteTo(disc.ToBytes(), &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}); err != nil {
		return err
	}
	var offers []*dhcpv4.DHCPv4
	read := func(until time.Time, xid dhcpv4.TransactionID, port int) error {
		conn.SetReadDeadline(until)
		buf := make([]byte, 1500)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					return nil
				}
				return err
			}
			r, err := dhcpv4.FromBytes(buf[:n])
			if err != nil {
				fmt.Fprintln(os.Stderr, "probe: unparsable reply:", err)
				continue
			}
			if r.OpCode != dhcpv4.OpcodeBootReply || r.TransactionID != xid {
				continue
			}
			out := probeReply{Port: port, Type: r.MessageType().String(), YourIP: r.YourIPAddr.String(), ServerIP: r.ServerIPAddr.String(),
				File: r.BootFileName, Vendor: r.ClassIdentifier()}
			if id := r.ServerIdentifier(); id != nil {
				out.ServerID = id.String()
			}
			json.NewEncoder(os.Stdout).Encode(out)
			offers = append(offers, r)
		}
	}
	if err := read(time.Now().Add(spec.Wait), disc.TransactionID, dhcpv4.ServerPort); err != nil {
		return err
	}
	if spec.Select {
		var chosen *dhcpv4.DHCPv4
		for _, o := range offers {
			if o.MessageType() == dhcpv4.MessageTypeOffer && !o.YourIPAddr.IsUnspecified() && chosen == nil {
				chosen = o
			}
		}
		if chosen == nil {
			return fmt.Errorf("no offer with an address among %d replies", len(offers))
		}
		ip := chosen.YourIPAddr
		if spec.Request != "" {
			ip = net.ParseIP(spec.Request)
		}
		req := pxe(dhcpv4.MessageTypeRequest, spec.Arch, dhcpv4.WithTransactionID(disc.TransactionID),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(chosen.ServerIdentifier())),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip)))
		if _, err := conn.WriteTo(req.ToBytes(), &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}); err != nil {
			return err
		}
		if err := read(time.Now().Add(spec.Wait), req.TransactionID, dhcpv4.ServerPort); err != nil {
			return err
		}
	}
	if spec.Proxy == "" {
		return nil
	}
	to, err := net.ResolveUDPAddr("udp4", spec.Proxy)
	if err != nil {
		return err
	}
	req := pxe(dhcpv4.MessageTypeRequest, spec.ProxyArch, dhcpv4.WithClientIP(net.ParseIP(spec.ClientIP)), dhcpv4.WithBroadcast(false))
	if _, err := conn.WriteTo(req.ToBytes(), to); err != nil {
		return err
	}
	return read(time.Now().Add(spec.Wait), req.TransactionID, to.Port)
}
