package metal

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// hiddenAdvice is what frees capacity a disk hides from a wipe, which no wipe mode
// reaches (docs/ramdisk.md, "Hidden capacity").
const hiddenAdvice = "attach or delete the hidden NVMe namespace (nvme attach-ns, delete-ns) or restore the ATA native max (hdparm -N p), " +
	"on the node's ramdisk (`nodes rescue ID`, from failed too) or out of band"

// HiddenCapacityWarnings say, a disk of disks (a node's disks inventory section) at a
// time, which hide capacity that may hold data from a wipe (proto.HiddenCapacity.HoldsData)
// as the ramdisk asked their devices: a release's wipe of the node is not attested while
// any does. None for disks nobody asked (bcd node does not: the registry keeps the
// ramdisk's findings in the disks it reports).
func HiddenCapacityWarnings(disks []proto.DiskInfo) []string {
	var out []string
	for _, d := range disks {
		if f := d.Erase.Firmware; f != nil && slices.ContainsFunc(f.Hidden, proto.HiddenCapacity.HoldsData) {
			out = append(out, fmt.Sprintf("disk %s hides capacity no wipe reaches: %s; a wipe of the node is not attested until you %s",
				d.Name, proto.HiddenText(f.Hidden), hiddenAdvice))
		}
	}
	return out
}

// warnHidden tells of the disks whose devices hide capacity from a wipe in inv, the
// hardware inventory.refresh found on the node's ramdisk: a disk.hidden event each on the
// node, written through the attempt, and a WARN. It fails nothing: the operator frees the
// capacity before a release, whose wipe would not be attested.
func (s *Service) warnHidden(a *workflow.Attempt, inv json.RawMessage) error {
	var hw proto.HardwareInventory
	if json.Unmarshal(inv, &hw) != nil {
		return nil
	}
	warnings := HiddenCapacityWarnings(hw.Disks)
	if len(warnings) == 0 {
		return nil
	}
	step := store.RunStep{Phase: a.Step.Phase, Index: a.Step.Index}.Path()
	for _, w := range warnings {
		s.cfg.Log.Warn("a disk hides capacity from a wipe", "node", a.Node.ID, "workflow", a.Run.ID, "step", step, "detail", w)
	}
	return a.Update(func(tx *store.Tx) error {
		for _, w := range warnings {
			e := store.Event{Node: a.Node.ID, Tenant: a.Node.Tenant, Kind: store.EventHiddenCapacity, Workflow: a.Run.ID, Step: step, Use: a.Step.Use, Detail: w}
			if _, err := tx.AppendEvent(e); err != nil {
				return err
			}
		}
		return nil
	})
}
