package site

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"

	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/proto"
)

// maxDiscoveries bounds the machines the `discoveries` section lists; the ones seen
// longest ago give way.
const maxDiscoveries = 1024

// discoveries collects the boot server's discoveries into the `discoveries` inventory
// section. Discovered never blocks: it records and signals; report sends.
type discoveries struct {
	mu      sync.Mutex
	byMAC   map[string]*proto.Discovery
	changed chan struct{}
}

func newDiscoveries() *discoveries {
	return &discoveries{byMAC: map[string]*proto.Discovery{}, changed: make(chan struct{}, 1)}
}

// Discovered is boot.Discoveries.
func (d *discoveries) Discovered(bd boot.Discovery) {
	mac := bd.MAC.String()
	d.mu.Lock()
	x, ok := d.byMAC[mac]
	if !ok {
		if len(d.byMAC) >= maxDiscoveries {
			d.dropOldest()
		}
		x = &proto.Discovery{MAC: mac, FirstSeen: bd.At}
		d.byMAC[mac] = x
	}
	x.LastSeen = bd.At
	if bd.UUID != "" {
		x.ProductUUID = bd.UUID
	}
	if bd.HasArch {
		arch := bd.Arch
		x.Arch = &arch
	}
	d.mu.Unlock()
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// dropOldest forgets the machine seen longest ago; d.mu is held.
func (d *discoveries) dropOldest() {
	var oldest *proto.Discovery
	for _, x := range d.byMAC {
		if oldest == nil || x.LastSeen.Before(oldest.LastSeen) {
			oldest = x
		}
	}
	delete(d.byMAC, oldest.MAC)
}

// section is the `discoveries` section now, ordered by MAC.
func (d *discoveries) section() json.RawMessage {
	d.mu.Lock()
	list := make([]proto.Discovery, 0, len(d.byMAC))
	for _, mac := range slices.Sorted(maps.Keys(d.byMAC)) {
		list = append(list, *d.byMAC[mac])
	}
	d.mu.Unlock()
	data, _ := json.Marshal(list)
	return data
}

// report sends the section whenever it changed, until ctx ends.
func (d *discoveries) report(ctx context.Context, set func(section string, data json.RawMessage)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.changed:
			set(proto.SectionDiscoveries, d.section())
		}
	}
}
