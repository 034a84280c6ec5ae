package boot

import (
	"net"
	"sync"
	"time"
)

// Discoveries hears of machines that ask to boot and have no entry, so that the site
// agent can report them to the registry for PXE discovery. The server calls it from its
// request handlers, at most once per machine per Config.DiscoveryInterval unless what it
// knows of the machine grows, from many goroutines at once; it must not block.
type Discoveries interface {
	Discovered(Discovery)
}

// Discovery is what the boot server learned of an unknown machine.
type Discovery struct {
	// MAC is the address the machine boots from.
	MAC net.HardwareAddr
	// UUID is the product UUID of DHCP option 97, spelled as dmidecode and Redfish spell
	// the SMBIOS UUID (the first three fields of the bytes sent are byte-swapped; see
	// docs/boot.md); empty when the machine has not sent one yet.
	UUID string
	// Arch is the client architecture of DHCP option 93 (0 BIOS, 7 UEFI x86-64, 11 UEFI
	// arm64, 16 UEFI HTTP boot, ...); valid when HasArch.
	Arch    uint16
	HasArch bool
	// Source is how the machine asked: "dhcp", or "http" for a script request.
	Source string
	// At is when it asked.
	At time.Time
}

// maxRemembered bounds the machines the de-duplication remembers; past it the memory is
// dropped and every machine may be reported once more.
const maxRemembered = 65536

// discoverer de-duplicates discoveries before they reach the sink.
type discoverer struct {
	sink     Discoveries
	clock    Clock
	interval time.Duration

	mu   sync.Mutex
	seen map[string]Discovery
}

func newDiscoverer(sink Discoveries, clock Clock, interval time.Duration) *discoverer {
	return &discoverer{sink: sink, clock: clock, interval: interval, seen: map[string]Discovery{}}
}

// record merges d with what is known of the machine and reports it when the machine is
// new, when it learned something (a UUID, an architecture), or when the interval since
// the last report has passed.
func (d *discoverer) record(n Discovery) {
	if d.sink == nil {
		return
	}
	n.At = d.clock.Now()
	key := n.MAC.String()
	d.mu.Lock()
	prev, known := d.seen[key]
	if known {
		if n.UUID == "" {
			n.UUID = prev.UUID
		}
		if !n.HasArch {
			n.Arch, n.HasArch = prev.Arch, prev.HasArch
		}
	}
	news := !known || n.UUID != prev.UUID || n.HasArch != prev.HasArch || n.Arch != prev.Arch ||
		n.At.Sub(prev.At) >= d.interval
	if !news {
		d.mu.Unlock()
		return
	}
	if len(d.seen) >= maxRemembered {
		clear(d.seen)
	}
	d.seen[key] = n
	d.mu.Unlock()
	d.sink.Discovered(n)
}
