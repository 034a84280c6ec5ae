package api

import (
	"context"

	"github.com/better-compute/better-compute/registry/store"
)

// NodeInventory is the answer of metal.inventory: every inventory section the node's
// agents reported (its ramdisk's and its installed OS's hardware sections, system,
// cpu, memory, disks, nics, gpus, and bcd node's host convergence), each as the agent
// sent it last, with when.
type NodeInventory struct {
	NodeID   string             `json:"nodeId"`
	Sections []InventorySection `json:"sections"`
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
			out.Sections = viewsOf(sections, sectionOf)
			return err
		})
		return out, err
	})
}
