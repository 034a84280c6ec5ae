package site

import (
	"net"
	"sync"

	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/cache"
	"github.com/better-compute/better-compute/proto"
)

// entries is the boot entries of the site's NodeSpec, as the boot server asks for them:
// by MAC. It is replaced whole on every NodeSpec.
type entries struct {
	ramdisk  RamdiskConfig
	httpBase string

	mu     sync.RWMutex
	byMAC  map[string]boot.Entry
	byNode map[string]proto.BootKind
}

// Entry is boot.Entries.
func (t *entries) Entry(mac net.HardwareAddr) (boot.Entry, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, ok := t.byMAC[mac.String()]
	return e, ok
}

// kind is the kind of node's boot entry; "" when it has none.
func (t *entries) kind(node string) proto.BootKind {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byNode[node]
}

// set makes list the site's boot entries.
func (t *entries) set(list []proto.BootEntry) {
	byMAC := map[string]boot.Entry{}
	byNode := map[string]proto.BootKind{}
	for _, pe := range list {
		e := t.convert(pe)
		for _, mac := range pe.MACs {
			byMAC[mac] = e
		}
		byNode[pe.Node] = pe.Kind
	}
	t.mu.Lock()
	t.byMAC, t.byNode = byMAC, byNode
	t.mu.Unlock()
}

// convert is the boot server's entry for a NodeSpec entry (validated by the session).
func (t *entries) convert(pe proto.BootEntry) boot.Entry {
	switch pe.Kind {
	case proto.BootRamdisk:
		r := pe.Ramdisk
		e := boot.Entry{Kind: boot.KindRamdisk, Ramdisk: boot.Ramdisk{
			Kernel: t.ramdisk.Kernel, Initrd: t.ramdisk.Initrd,
			Token: r.Token, Registry: r.Registry, Pins: r.Pins,
			Args: append(append([]string(nil), t.ramdisk.Args...), r.Args...),
		}}
		if r.Kernel != "" {
			e.Ramdisk.Kernel = r.Kernel
		}
		if r.Initrd != "" {
			e.Ramdisk.Initrd = r.Initrd
		}
		return e
	case proto.BootSanboot:
		return boot.Entry{Kind: boot.KindSanboot, ISO: t.httpBase + cache.ImagePathPrefix + pe.Sanboot.Image}
	default:
		return boot.Entry{Kind: boot.KindDisk}
	}
}
