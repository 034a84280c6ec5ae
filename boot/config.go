// Package boot is the boot server of `bcd site`: DHCP on the provisioning interface
// (authoritative for a range, or proxyDHCP beside another DHCP server), TFTP for the
// iPXE binaries, and HTTP for per-machine iPXE scripts, the ramdisk's kernel and initrd,
// and the binaries of UEFI HTTP boot. It owns the interfaces it consumes: Entries says
// how each known machine boots, and Discoveries hears of the machines nobody knows yet.
package boot

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Duration is a time.Duration written in JSON as Go's duration text: "90s", "10m", "1h".
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as text, as UnmarshalJSON reads it.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads duration text. Anything else is a *json.UnmarshalTypeError, to
// which encoding/json adds the field's path.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		if v, err := time.ParseDuration(s); err == nil {
			*d = Duration(v)
			return nil
		}
	}
	return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[Duration]()}
}

// Mode is how the DHCP server shares the network.
type Mode string

// The DHCP modes.
const (
	// Authoritative hands out the addresses of Config.Range and boot information.
	Authoritative Mode = "authoritative"
	// Proxy answers network-boot clients with boot information only (proxyDHCP, ports
	// 67 and 4011), beside another DHCP server that hands out the addresses.
	Proxy Mode = "proxy"
)

// Range is an inclusive range of IPv4 addresses.
type Range struct {
	// Start is the first address handed out.
	Start netip.Addr `json:"start"`
	// End is the last address handed out.
	End netip.Addr `json:"end"`
}

// Subnet is a routed provisioning subnet, reached through DHCP relay agents. Its
// machines reach the boot server's TFTP and HTTP at Config.ServerIP, through their
// router.
type Subnet struct {
	// Subnet is the network, for example 10.1.0.0/24; its mask goes to clients.
	Subnet netip.Prefix `json:"subnet"`
	// Range is the addresses leased, inside Subnet and without its own (first) address
	// or its broadcast (last) one. Required.
	Range Range `json:"range"`
	// Router is the subnet's default gateway (option 3); none when zero. Never leased.
	Router netip.Addr `json:"router"`
	// DNS is the name servers given to clients (option 6); none when empty.
	DNS []netip.Addr `json:"dns"`
	// LeaseTime is how long a lease lasts (default Config.LeaseTime).
	LeaseTime Duration `json:"leaseTime"`
}

// Config is the boot server's configuration. Fields left zero take the defaults of
// withDefaults; Check says what is wrong with the rest.
type Config struct {
	// Interface is the provisioning network interface, for example "eno2". DHCP listens
	// only there (SO_BINDTODEVICE). Required.
	Interface string `json:"interface"`
	// Mode is "authoritative" or "proxy". Required.
	Mode Mode `json:"mode"`
	// ServerIP is this host's IPv4 address on Interface. TFTP and HTTP listen on it, and
	// every URL and next-server the boot server hands out names it. Required.
	ServerIP netip.Addr `json:"serverIP"`
	// Subnet is the provisioning network of Interface, for example 10.0.0.0/24: its mask
	// goes to clients (option 1), and Range and Router must lie inside it. It, Range,
	// Router, DNS and LeaseTime are the local subnet, whose clients ask without a relay
	// agent; a site that leases only to Subnets leaves Subnet and Range out.
	// Authoritative only.
	Subnet netip.Prefix `json:"subnet"`
	// Range is the addresses leased to clients, inside Subnet and without its own or
	// its broadcast address; ServerIP is never leased even when inside. Authoritative
	// only, required there.
	Range Range `json:"range"`
	// Router is the default gateway given to clients (option 3); none when zero.
	// Authoritative only.
	Router netip.Addr `json:"router"`
	// DNS is the name servers given to clients (option 6); none when empty.
	// Authoritative only.
	DNS []netip.Addr `json:"dns"`
	// LeaseTime is how long a lease lasts (default 1h). Authoritative only.
	LeaseTime Duration `json:"leaseTime"`
	// Subnets are the routed provisioning subnets: machines behind DHCP relay agents,
	// each subnet with its own range, router, DNS and lease time. A relayed request is
	// answered from the subnet that holds its link's address (option 82 sub-option 5,
	// else option 118, else giaddr), and not at all when none does. Authoritative only.
	Subnets []Subnet `json:"subnets"`
	// UnknownShare is the fraction of each subnet's range, more than 0 and at most 1,
	// that machines the site does not know may hold at once, leases and offers (default
	// 0.5; at least one address). A machine with an entry gets an address whenever one
	// is not held by another machine with an entry, taking the address of a machine
	// without one when none is free. Authoritative only.
	UnknownShare float64 `json:"unknownShare"`
	// UnknownLeaseTime is how long the lease of a machine the site does not know lasts
	// (default 10m, at least 1m; at most its subnet's lease time). Authoritative only.
	UnknownLeaseTime Duration `json:"unknownLeaseTime"`
	// ConflictCheck says whether an address no lease accounts for is checked before it
	// is offered: an ICMP echo to it, and an address a host answers at is held away as a
	// declined one and the next tried (default true). Authoritative only.
	ConflictCheck *bool `json:"conflictCheck"`
	// ConflictCheckTimeout is how long a check waits for the echo's reply before it takes
	// the address as free (default 500ms, 10ms-1s). Authoritative only.
	ConflictCheckTimeout Duration `json:"conflictCheckTimeout"`
	// HeldAwayShare is the fraction of each subnet's range, more than 0 and at most 1,
	// that may be held away at once as in use: found so by the conflict check, or
	// declined by clients (default 0.125; at least one address). Beyond it the server
	// offers without the check and a declined address is not held, until a hold ends, so
	// that a host answering at every address, or declining every offer, cannot leave
	// booting machines none. Authoritative only.
	HeldAwayShare float64 `json:"heldAwayShare"`
	// LeaseFile is the bbolt file leases are kept in across restarts. Authoritative
	// only, required there.
	LeaseFile string `json:"leaseFile"`
	// IPXEDir holds the iPXE binaries served by TFTP and, for UEFI HTTP boot, by HTTP
	// (default /usr/lib/ipxe, where Debian's ipxe package installs them).
	IPXEDir string `json:"ipxeDir"`
	// BIOSBinary is the file for BIOS firmware, architecture 0 (default undionly.kpxe).
	BIOSBinary string `json:"biosBinary"`
	// UEFIBinary is the file for x86-64 UEFI, architectures 7, 9 and 16 (HTTP boot):
	// snponly.efi (the default) drives the NIC through the firmware's own network
	// protocol; ipxe.efi brings iPXE's drivers.
	UEFIBinary string `json:"uefiBinary"`
	// ARM64Binary is the file for arm64 UEFI, architectures 11 and 19 (default
	// ipxe-arm64.efi). Such clients are answered only when the file is in IPXEDir.
	ARM64Binary string `json:"arm64Binary"`
	// ShimFile is the first stage of the signed chain that machines booting under UEFI
	// Secure Boot are given instead of iPXE (Entry.SecureBoot): shim signed by Microsoft,
	// served by TFTP as secureboot/shimx64.efi and by HTTP at /secureboot/shimx64.efi
	// (default /usr/lib/shim/shimx64.efi.signed, Debian's shim-signed).
	ShimFile string `json:"shimFile"`
	// GRUBFile is the network GRUB shim starts, signed by the key shim trusts, served
	// beside shim as secureboot/grubx64.efi, the name shim asks for (default
	// /usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed, Debian's
	// grub-efi-amd64-signed).
	GRUBFile string `json:"grubFile"`
	// RamdiskDir holds the ramdisk kernels and initrds served at /ramdisk/<name>; an
	// entry's kernel or initrd given as a plain name is a file here. Required.
	RamdiskDir string `json:"ramdiskDir"`
	// DHCPPort is the DHCP server port (default 67).
	DHCPPort int `json:"dhcpPort"`
	// ProxyPort is the proxyDHCP boot-server port (default 4011). Proxy only.
	ProxyPort int `json:"proxyPort"`
	// TFTPPort is the TFTP port (default 69).
	TFTPPort int `json:"tftpPort"`
	// HTTPPort is the HTTP port of scripts, ramdisks and HTTP boot (default 80).
	HTTPPort int `json:"httpPort"`
	// TFTPBlockSize is the largest blksize a TFTP client may negotiate (default 1468, one
	// Ethernet frame); at least 512.
	TFTPBlockSize int `json:"tftpBlockSize"`
	// TFTPWindowSize is the largest windowsize (RFC 7440) a TFTP client may negotiate:
	// blocks sent per acknowledgement (default 8, 1-64). Clients that do not ask get
	// one block per acknowledgement.
	TFTPWindowSize int `json:"tftpWindowSize"`
	// HTTPSendBuffer is the send buffer of each HTTP connection in bytes (default 256 KiB;
	// -1 leaves it to the kernel's autotuning). A fixed buffer keeps a storm's thousand
	// downloads from filling the kernel's TCP memory; one download then moves at most
	// about this much per round trip (some 2 Gb/s at 1 ms).
	HTTPSendBuffer int `json:"httpSendBuffer"`
	// HTTPIdleTimeout is how long an idle keep-alive HTTP connection stays open (default
	// 60s, at least 1s).
	HTTPIdleTimeout Duration `json:"httpIdleTimeout"`
	// HTTPStallTimeout is how long one write of a response, at most httpWriteChunk bytes,
	// may take before the connection is closed (default 60s, at least 1s): a client that
	// stops reading is let go, while a download of any size that keeps moving runs as
	// long as it needs. No deadline bounds a whole response.
	HTTPStallTimeout Duration `json:"httpStallTimeout"`
	// HTTPDownloads is how many ramdisk downloads send at once (default 64; -1 for no
	// bound). The others wait, the downloads of the machine that asked first going first,
	// so that in a boot storm the first machines have their files early instead of every
	// machine near the end.
	HTTPDownloads int `json:"httpDownloads"`
	// HTTPDownloadWait is the longest a ramdisk download waits for its turn (default
	// 60s, at least 1s); past it, it sends anyway.
	HTTPDownloadWait Duration `json:"httpDownloadWait"`
	// RetryInterval is how long a machine without an entry, or whose boot failed, waits
	// before it asks for its script again (default 10s, at least 1s).
	RetryInterval Duration `json:"retryInterval"`
	// DiscoveryInterval is how often the same unknown machine is reported again while it
	// keeps asking (default 5m).
	DiscoveryInterval Duration `json:"discoveryInterval"`
}

// configPath is the root of the paths Check names.
const configPath = "boot."

// withDefaults returns c with every zero field that has a default set to it. It is the
// one place defaults live.
func (c Config) withDefaults() Config {
	set := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setS := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	setD := func(p *Duration, v time.Duration) {
		if *p == 0 {
			*p = Duration(v)
		}
	}
	setS(&c.IPXEDir, "/usr/lib/ipxe")
	setS(&c.BIOSBinary, "undionly.kpxe")
	setS(&c.UEFIBinary, "snponly.efi")
	setS(&c.ARM64Binary, "ipxe-arm64.efi")
	setS(&c.ShimFile, "/usr/lib/shim/shimx64.efi.signed")
	setS(&c.GRUBFile, "/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed")
	set(&c.DHCPPort, 67)
	set(&c.ProxyPort, 4011)
	set(&c.TFTPPort, 69)
	set(&c.HTTPPort, 80)
	set(&c.TFTPBlockSize, 1468)
	set(&c.TFTPWindowSize, 8)
	set(&c.HTTPSendBuffer, 256<<10)
	set(&c.HTTPDownloads, 64)
	setD(&c.LeaseTime, time.Hour)
	setD(&c.UnknownLeaseTime, 10*time.Minute)
	if c.UnknownShare == 0 {
		c.UnknownShare = 0.5
	}
	if c.ConflictCheck == nil {
		c.ConflictCheck = new(true)
	}
	setD(&c.ConflictCheckTimeout, 500*time.Millisecond)
	if c.HeldAwayShare == 0 {
		c.HeldAwayShare = 0.125
	}
	c.Subnets = slices.Clone(c.Subnets)
	for i := range c.Subnets {
		if c.Subnets[i].LeaseTime == 0 {
			c.Subnets[i].LeaseTime = c.LeaseTime
		}
	}
	setD(&c.HTTPIdleTimeout, time.Minute)
	setD(&c.HTTPStallTimeout, time.Minute)
	setD(&c.HTTPDownloadWait, time.Minute)
	setD(&c.RetryInterval, 10*time.Second)
	setD(&c.DiscoveryInterval, 5*time.Minute)
	return c
}

// Check returns every problem of c (after defaults) as INVALID_CONFIG errors naming
// their field, joined; nil when c can be served.
func (c Config) Check() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, proto.Errorf(proto.InvalidConfig, format, args...).WithPath(configPath+field))
	}
	if c.Interface == "" {
		bad("interface", "the provisioning interface is required, for example \"eno2\"")
	}
	if !c.ServerIP.Is4() {
		bad("serverIP", "this host's IPv4 address on the provisioning interface is required")
	}
	switch c.Mode {
	case Authoritative:
		c.checkAuthoritative(bad)
	case Proxy:
		if c.ProxyPort == c.DHCPPort {
			bad("proxyPort", "the boot-server port %d is the DHCP port: give it a port of its own (default 4011)", c.ProxyPort)
		}
	default:
		bad("mode", "mode %q: want \"authoritative\" or \"proxy\"", c.Mode)
	}
	type named[T any] struct {
		field string
		v     T
	}
	for _, d := range []named[string]{{"ipxeDir", c.IPXEDir}, {"ramdiskDir", c.RamdiskDir}} {
		field, dir := d.field, d.v
		if dir == "" {
			bad(field, "a directory is required")
		} else if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			bad(field, "%s is not a directory", dir)
		}
	}
	for _, b := range []named[string]{{"biosBinary", c.BIOSBinary}, {"uefiBinary", c.UEFIBinary}, {"arm64Binary", c.ARM64Binary}} {
		field, name := b.field, b.v
		if filepath.Base(name) != name || name == "." || name == ".." {
			bad(field, "%q must be a file name inside ipxeDir", name)
		}
	}
	for _, f := range []named[string]{{"shimFile", c.ShimFile}, {"grubFile", c.GRUBFile}} {
		if !filepath.IsAbs(f.v) {
			bad(f.field, "%q must be an absolute path", f.v)
		}
	}
	for _, p := range []named[int]{{"dhcpPort", c.DHCPPort}, {"proxyPort", c.ProxyPort}, {"tftpPort", c.TFTPPort}, {"httpPort", c.HTTPPort}} {
		field, port := p.field, p.v
		if port < 1 || port > 65535 {
			bad(field, "port %d is outside 1-65535", port)
		}
	}
	if c.TFTPBlockSize < 512 || c.TFTPBlockSize > 65464 {
		bad("tftpBlockSize", "block size %d is outside 512-65464", c.TFTPBlockSize)
	}
	if c.TFTPWindowSize < 1 || c.TFTPWindowSize > 64 {
		bad("tftpWindowSize", "window size %d is outside 1-64", c.TFTPWindowSize)
	}
	if c.HTTPSendBuffer != -1 && (c.HTTPSendBuffer < 4096 || c.HTTPSendBuffer > 64<<20) {
		bad("httpSendBuffer", "send buffer %d is neither -1 nor within 4096-67108864", c.HTTPSendBuffer)
	}
	if c.HTTPDownloads != -1 && (c.HTTPDownloads < 1 || c.HTTPDownloads > 65536) {
		bad("httpDownloads", "%d downloads at once is neither -1 (no bound) nor within 1-65536", c.HTTPDownloads)
	}
	for _, d := range []named[Duration]{{"httpIdleTimeout", c.HTTPIdleTimeout}, {"httpStallTimeout", c.HTTPStallTimeout}, {"httpDownloadWait", c.HTTPDownloadWait}} {
		if d.v < Duration(time.Second) {
			bad(d.field, "timeout %s is under 1s", d.v)
		}
	}
	if c.RetryInterval < Duration(time.Second) {
		bad("retryInterval", "retry interval %s is under 1s", c.RetryInterval)
	}
	if c.DiscoveryInterval < 0 {
		bad("discoveryInterval", "discovery interval %s is negative", c.DiscoveryInterval)
	}
	return errors.Join(errs...)
}

// hasLocal reports whether the server leases addresses on its own segment: it does
// unless the config leaves every field of the local subnet out (LeaseTime, which has a
// default, aside) and lists routed Subnets.
func (c Config) hasLocal() bool {
	return c.Subnet.IsValid() || c.Range.Start.IsValid() || c.Range.End.IsValid() || c.Router.IsValid() || len(c.DNS) > 0 ||
		len(c.Subnets) == 0
}

// local is the local subnet as a Subnet.
func (c Config) local() Subnet {
	return Subnet{Subnet: c.Subnet, Range: c.Range, Router: c.Router, DNS: c.DNS, LeaseTime: c.LeaseTime}
}

// checkAuthoritative checks the fields only the authoritative mode uses.
func (c Config) checkAuthoritative(bad func(field, format string, args ...any)) {
	type named struct {
		prefix string // of the paths of the subnet's fields
		sub    Subnet
	}
	var all []named
	if c.hasLocal() {
		all = append(all, named{"", c.local()})
		if c.Subnet.IsValid() && c.ServerIP.Is4() && !c.Subnet.Contains(c.ServerIP) {
			bad("serverIP", "%s is outside the subnet %s", c.ServerIP, c.Subnet)
		}
	}
	for i, sub := range c.Subnets {
		all = append(all, named{fmt.Sprintf("subnets[%d].", i), sub})
	}
	for i, a := range all {
		a.sub.check(a.prefix, bad)
		for _, b := range all[:i] {
			if a.sub.Subnet.IsValid() && b.sub.Subnet.IsValid() && a.sub.Subnet.Overlaps(b.sub.Subnet) {
				bad(a.prefix+"subnet", "%s overlaps %s: each address belongs to one subnet", a.sub.Subnet, b.sub.Subnet)
			}
		}
	}
	if c.LeaseFile == "" {
		bad("leaseFile", "the lease file is required in authoritative mode")
	}
	if !(c.UnknownShare > 0 && c.UnknownShare <= 1) {
		bad("unknownShare", "share %g of the range for machines the site does not know is outside (0, 1]: discovery needs some, 1 is no bound", c.UnknownShare)
	}
	if c.UnknownLeaseTime < Duration(time.Minute) {
		bad("unknownLeaseTime", "lease time %s is under a minute", c.UnknownLeaseTime)
	}
	if c.ConflictCheckTimeout < Duration(10*time.Millisecond) || c.ConflictCheckTimeout > Duration(time.Second) {
		bad("conflictCheckTimeout", "wait %s is outside 10ms-1s: up to three addresses are checked before an offer, which firmware expects within 4s",
			c.ConflictCheckTimeout)
	}
	if !(c.HeldAwayShare > 0 && c.HeldAwayShare <= 1) {
		bad("heldAwayShare", "share %g of the range held away as in use is outside (0, 1]: 1 is no bound", c.HeldAwayShare)
	}
}

// lastAddr is the last address of the IPv4 prefix p: its broadcast address.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := ^uint32(0) >> p.Bits()
	for i := range a {
		a[i] |= byte(host >> (24 - 8*i))
	}
	return netip.AddrFrom4(a)
}

// check checks one subnet, naming its fields below prefix ("" for the local subnet,
// "subnets[i]." for a routed one).
func (sub Subnet) check(prefix string, bad func(field, format string, args ...any)) {
	valid := sub.Subnet.IsValid() && sub.Subnet.Addr().Is4()
	if !valid {
		bad(prefix+"subnet", "the provisioning subnet is required in authoritative mode, for example 10.0.0.0/24")
	}
	outside := func(a netip.Addr) bool { return valid && !sub.Subnet.Contains(a) }
	switch {
	case !sub.Range.Start.Is4():
		bad(prefix+"range.start", "the first address of the range is required in authoritative mode")
	case outside(sub.Range.Start):
		bad(prefix+"range.start", "%s is outside the subnet %s", sub.Range.Start, sub.Subnet)
	}
	switch {
	case !sub.Range.End.Is4():
		bad(prefix+"range.end", "the last address of the range is required in authoritative mode")
	case outside(sub.Range.End):
		bad(prefix+"range.end", "%s is outside the subnet %s", sub.Range.End, sub.Subnet)
	case sub.Range.Start.Is4() && sub.Range.End.Less(sub.Range.Start):
		bad(prefix+"range.end", "%s comes before the range's start %s", sub.Range.End, sub.Range.Start)
	}
	if valid && sub.Subnet.Bits() <= 30 && sub.Range.Start.Is4() && sub.Range.End.Is4() {
		network, broadcast := sub.Subnet.Masked().Addr(), lastAddr(sub.Subnet)
		if sub.Range.Start == network {
			bad(prefix+"range.start", "%s is the subnet's own address, which no machine may take: start the range after it", network)
		}
		if sub.Range.End == broadcast {
			bad(prefix+"range.end", "%s is the subnet's broadcast address, which no machine may take (and whose conflict check the kernel refuses): "+
				"end the range before it", broadcast)
		}
	}
	if sub.Router.IsValid() && (!sub.Router.Is4() || outside(sub.Router)) {
		bad(prefix+"router", "%s is not an IPv4 address of the subnet %s", sub.Router, sub.Subnet)
	}
	for i, d := range sub.DNS {
		if !d.Is4() {
			bad(fmt.Sprintf("%sdns[%d]", prefix, i), "%s is not an IPv4 address", d)
		}
	}
	if sub.LeaseTime < Duration(time.Minute) {
		bad(prefix+"leaseTime", "lease time %s is under a minute", sub.LeaseTime)
	}
}
