package metal

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// hiddenInventory is a ramdisk's inventory.refresh answer for the machine of
// TestVMWipeHidden (e2e/vm): qemu's NVMe controller with namespace 2, 64 MiB, allocated
// but not attached, and a SATA disk whose device hides nothing; beside them a drive
// over-provisioned by a namespace smaller than its NVM, which a wipe attests.
const hiddenInventory = `{"disks":[
	{"name":"nvme0n1","sizeBytes":67108864,"transport":"nvme","erase":{"discard":true,"writeZeroes":true,
		"firmware":{"nvmeFormat":true,"hidden":[{"kind":"nvme-namespace-detached","nsid":2,"bytes":67108864}]}}},
	{"name":"sda","sizeBytes":67108864,"transport":"sata","erase":{"discard":false,"writeZeroes":false,"firmware":{}}},
	{"name":"nvme1n1","sizeBytes":1600000000000,"transport":"nvme","erase":{"discard":true,"writeZeroes":true,
		"firmware":{"nvmeFormat":true,"hidden":[{"kind":"nvme-capacity-unallocated","bytes":320000000000}]}}}]}`

// TestInspectWarnsOfHiddenCapacity: an inspection whose ramdisk finds a disk hiding
// capacity from a wipe (a detached NVMe namespace) succeeds, the node ready, and tells
// the operator before any release fails on it: a disk.hidden event at the step, naming
// the disk, what it hides and what frees it; nothing of the drive whose only hidden NVM
// is in no namespace, whose wipe is attested. Before, the inventory did not say, and the
// operator learned of it when a release's wipe was not attested.
func TestInspectWarnsOfHiddenCapacity(t *testing.T) {
	h := newHarness(t)
	node := h.inState(store.NodeReady)
	h.machine.answers[proto.CommandInventoryRefresh] = func(json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(hiddenInventory), nil
	}
	run, _, err := h.act(node, Inspect, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run, n := h.end(run.ID)
	if run.State != store.RunSucceeded || n.State != store.NodeReady {
		t.Fatalf("the inspection %s, node %s (%+v); want a warning, not a failure", run.State, n.State, n.Failure)
	}
	var warned []store.Event
	if err := h.store.View(func(tx *store.Tx) error {
		events, _, err := tx.Events(node, "", store.Page{})
		for _, e := range events {
			if e.Kind == store.EventHiddenCapacity {
				warned = append(warned, e)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(warned) != 1 {
		t.Fatalf("%d disk.hidden events, want 1 (nvme0n1): %+v", len(warned), warned)
	}
	e := warned[0]
	if e.Workflow != run.ID || e.Step != "steps[1]" || e.Use != proto.CommandInventoryRefresh ||
		!strings.Contains(e.Detail, "disk nvme0n1 hides capacity no wipe reaches: nvme-namespace-detached 2 (67108864 bytes)") ||
		!strings.Contains(e.Detail, "nvme attach-ns") {
		t.Errorf("the warning %+v; want nvme0n1's detached namespace at %s steps[1] and what frees it", e, run.ID)
	}
}
