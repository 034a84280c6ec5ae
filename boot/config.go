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
	// Subnet is the provisioning network, for example 10.0.0.0/24: its mask goes to
	// clients (option 1), and Range and Router must lie inside it. Authoritative only.
	Subnet netip.Prefix `json:"subnet"`
	// Range is the addresses leased to clients; ServerIP is never leased even when
	// inside. Authoritative only, required there.
	Range Range `json:"range"`
	// Router is the default gateway given to clients (option 3); none when zero.
	// Authoritative only.
	Router netip.Addr `json:"router"`
	// DNS is the name servers given to clients (option 6); none when empty.
	// Authoritative only.
	DNS []netip.Addr `json:"dns"`
	// LeaseTime is how long a lease lasts (default 1h). Authoritative only.
	LeaseTime Duration `json:"leaseTime"`
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
	set(&c.DHCPPort, 67)
	set(&c.ProxyPort, 4011)
	set(&c.TFTPPort, 69)
	set(&c.HTTPPort, 80)
	set(&c.TFTPBlockSize, 1468)
	set(&c.HTTPSendBuffer, 256<<10)
	setD(&c.LeaseTime, time.Hour)
	setD(&c.HTTPIdleTimeout, time.Minute)
	setD(&c.HTTPStallTimeout, time.Minute)
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
	for _, p := range []named[int]{{"dhcpPort", c.DHCPPort}, {"proxyPort", c.ProxyPort}, {"tftpPort", c.TFTPPort}, {"httpPort", c.HTTPPort}} {
		field, port := p.field, p.v
		if port < 1 || port > 65535 {
			bad(field, "port %d is outside 1-65535", port)
		}
	}
	if c.TFTPBlockSize < 512 || c.TFTPBlockSize > 65464 {
		bad("tftpBlockSize", "block size %d is outside 512-65464", c.TFTPBlockSize)
	}
	if c.HTTPSendBuffer != -1 && (c.HTTPSendBuffer < 4096 || c.HTTPSendBuffer > 64<<20) {
		bad("httpSendBuffer", "send buffer %d is neither -1 nor within 4096-67108864", c.HTTPSendBuffer)
	}
	for _, d := range []named[Duration]{{"httpIdleTimeout", c.HTTPIdleTimeout}, {"httpStallTimeout", c.HTTPStallTimeout}} {
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

// checkAuthoritative checks the fields only the authoritative mode uses.
func (c Config) checkAuthoritative(bad func(field, format string, args ...any)) {
	subnet := c.Subnet.IsValid() && c.Subnet.Addr().Is4()
	if !subnet {
		bad("subnet", "the provisioning subnet is required in authoritative mode, for example 10.0.0.0/24")
	}
	outside := func(a netip.Addr) bool { return subnet && !c.Subnet.Contains(a) }
	if c.ServerIP.Is4() && outside(c.ServerIP) {
		bad("serverIP", "%s is outside the subnet %s", c.ServerIP, c.Subnet)
	}
	switch {
	case !c.Range.Start.Is4():
		bad("range.start", "the first address of the range is required in authoritative mode")
	case outside(c.Range.Start):
		bad("range.start", "%s is outside the subnet %s", c.Range.Start, c.Subnet)
	}
	switch {
	case !c.Range.End.Is4():
		bad("range.end", "the last address of the range is required in authoritative mode")
	case outside(c.Range.End):
		bad("range.end", "%s is outside the subnet %s", c.Range.End, c.Subnet)
	case c.Range.Start.Is4() && c.Range.End.Less(c.Range.Start):
		bad("range.end", "%s comes before the range's start %s", c.Range.End, c.Range.Start)
	}
	if c.Router.IsValid() && (!c.Router.Is4() || outside(c.Router)) {
		bad("router", "%s is not an IPv4 address of the subnet %s", c.Router, c.Subnet)
	}
	for i, d := range c.DNS {
		if !d.Is4() {
			bad(fmt.Sprintf("dns[%d]", i), "%s is not an IPv4 address", d)
		}
	}
	if c.LeaseTime < Duration(time.Minute) {
		bad("leaseTime", "lease time %s is under a minute", c.LeaseTime)
	}
	if c.LeaseFile == "" {
		bad("leaseFile", "the lease file is required in authoritative mode")
	}
}
