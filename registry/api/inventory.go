package api

import (
	"context"
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
)

// NodeInventory is the answer of metal.inventory: every inventory section the node's
// agents reported (its ramdisk's and its installed OS's hardware sections, system,
// cpu, memory, disks, nics, gpus, and bcd node's host convergence), each as the agent
// sent it last (bcd node's disks with the ramdisk's firmware findings kept), with when,
// and what they warn of (inventoryWarnings).
type NodeInventory struct {
	NodeID   string             `json:"nodeId"`
	Sections []InventorySection `json:"sections"`
	Warnings []string           `json:"warnings,omitempty"`
}

// registerInventory adds metal.inventory.
func (s *Server) registerInventory() {
	Handle(s, "metal.inventory", ActionNodesRead, func(_ context.Context, c *Caller, req NodeKey) (out NodeInventory, err error) {
		err = c.view(func(tx *store.Tx) error {
			n, err := tenantNode(tx, c, req)
			if err != nil {
				return err
			}
			out.NodeID = n.ID
			sections, err := tx.Inventory(n.ID)
			out.Sections, out.Warnings = viewsOf(sections, sectionOf), inventoryWarnings(sections)
			return err
		})
		return out, err
	})
}

// inventoryWarnings are what a node's inventory sections say an operator should know
// before its next request: each disk whose device hides capacity that may hold data from
// a wipe, as its ramdisk last reported it (metal.HiddenCapacityWarnings), which a
// release's wipe does not reach and so is not attested.
func inventoryWarnings(sections []store.InventorySection) []string {
	for _, s := range sections {
		var disks []proto.DiskInfo
		if s.Section == proto.SectionDisks && json.Unmarshal(s.Data, &disks) == nil {
			return metal.HiddenCapacityWarnings(disks)
		}
	}
	return nil
}
