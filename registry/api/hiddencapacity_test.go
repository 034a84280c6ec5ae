package api

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestTheInventoryWarnsOfHiddenCapacity: a node whose ramdisk reported a disk hiding
// capacity from a wipe (TestVMWipeHidden's detached NVMe namespace 2, 64 MiB) is warned
// of in metal.get (nodes get, and the end of every --wait) and metal.inventory (nodes
// inventory), naming the disk, what it hides and what frees it; a drive whose only hidden
// NVM is in no namespace, whose wipe is attested, and a disk nobody asked (bcd node's
// inventory) are not. Before, neither answer said, and the operator learned of it when a
// release's wipe was not attested.
func TestTheInventoryWarnsOfHiddenCapacity(t *testing.T) {
	const disks = `[
		{"name":"nvme0n1","sizeBytes":67108864,"transport":"nvme","erase":{"discard":true,"writeZeroes":true,
			"firmware":{"nvmeFormat":true,"hidden":[{"kind":"nvme-namespace-detached","nsid":2,"bytes":67108864}]}}},
		{"name":"nvme1n1","sizeBytes":1600000000000,"transport":"nvme","erase":{"discard":true,"writeZeroes":true,
			"firmware":{"nvmeFormat":true,"hidden":[{"kind":"nvme-capacity-unallocated","bytes":320000000000}]}}},
		{"name":"vda","sizeBytes":67108864,"transport":"virtio","erase":{"discard":true,"writeZeroes":true}}]`
	var node string
	c := filteredPages(t, func(tx *store.Tx) error {
		n, err := tx.CreateNode(store.Node{Tenant: storetest.Tenant, Pool: storetest.Pool, MACs: []string{"52:54:00:00:00:01"}})
		if err != nil {
			return err
		}
		node = n.ID
		_, err = tx.PutInventory(n.ID, "disks", json.RawMessage(disks))
		return err
	})
	const want = "disk nvme0n1 hides capacity no wipe reaches: nvme-namespace-detached 2 (67108864 bytes); a wipe of the node is not attested until you attach or delete the hidden NVMe namespace"
	var view NodeView
	if err := c.Call(context.Background(), "metal.get", NodeKey{NodeID: node}, &view); err != nil {
		t.Fatal(err)
	}
	var inv NodeInventory
	if err := c.Call(context.Background(), "metal.inventory", NodeKey{NodeID: node}, &inv); err != nil {
		t.Fatal(err)
	}
	for method, warnings := range map[string][]string{"metal.get": view.Warnings, "metal.inventory": inv.Warnings} {
		if len(warnings) != 1 || !strings.HasPrefix(warnings[0], want) {
			t.Errorf("%s warns %q; want one warning, of nvme0n1: %q", method, warnings, want)
		}
	}
}
