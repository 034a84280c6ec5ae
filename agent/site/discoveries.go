package site

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/proto"
)

// maxDiscoveries bounds the machines the `discoveries` section lists; the ones seen
// longest ago give way.
const maxDiscoveries = proto.MaxDiscoveries

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

// section is the `discoveries` section now, the machines seen last first (then by MAC),
// cut to its budget, and the number of machines left out.
func (d *discoveries) section() (json.RawMessage, int) {
	d.mu.Lock()
	list := make([]proto.Discovery, 0, len(d.byMAC))
	for _, x := range d.byMAC {
		list = append(list, *x)
	}
	d.mu.Unlock()
	slices.SortFunc(list, func(a, b proto.Discovery) int {
		return cmp.Or(b.LastSeen.Compare(a.LastSeen), strings.Compare(a.MAC, b.MAC))
	})
	return cut(list, discoveriesBudget)
}

// report sends the section whenever it changed, until ctx ends.
func (d *discoveries) report(ctx context.Context, set func(section string, data json.RawMessage, omitted int)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.changed:
			data, omitted := d.section()
			set(proto.SectionDiscoveries, data, omitted)
		}
	}
}
