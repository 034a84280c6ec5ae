package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestHiddenCapacityOutlivesTheInstalledOSsReport: a machine's ramdisk reports, over
// real QUIC, two NVMe disks whose devices hide capacity from a wipe (a detached
// namespace each); then its installed OS's bcd node reports the same disks, one without
// firmware data, as bcd node does, the other claiming firmware that hides nothing. Both
// warnings stay in metal.get and metal.inventory, and the stored disks keep the ramdisk's
// findings, the rest of bcd node's report taken; a later inspection on the ramdisk that
// finds none clears them. Before, bcd node's report replaced the section and the
// warnings left while the disks still hid the capacity.
func TestHiddenCapacityOutlivesTheInstalledOSsReport(t *testing.T) {
	m := newRoleMachine(t, "52:54:00:00:08:21")
	f, node := m.f, m.node
	defer f.working(node)() // the inspection whose ramdisk it is runs
	ramdiskCreds, err := f.join(node, "ramdisk", f.mint(store.TokenRamdisk, node))
	if err != nil {
		t.Fatal(err)
	}
	hides := func(name, serial string, nsid int) string {
		return fmt.Sprintf(`{"name":%q,"serial":%q,"sizeBytes":1073741824,"transport":"nvme","erase":{"discard":true,"writeZeroes":true,`+
			`"firmware":{"nvmeFormat":true,"hidden":[{"kind":"nvme-namespace-detached","nsid":%d,"bytes":67108864}]}}}`, name, serial, nsid)
	}
	warned := func() (get, inventory []string) {
		t.Helper()
		key := api.NodeKey{TenantID: storetest.Tenant, NodeID: node}
		view, err := call[api.NodeView](f.admin, "metal.get", key)
		f.must(err, "metal.get")
		inv, err := call[api.NodeInventory](f.admin, "metal.inventory", key)
		f.must(err, "metal.inventory")
		return view.Warnings, inv.Warnings
	}

	ramdisk := f.newAgent(node, ramdiskCreds)
	rs := ramdisk.start()
	rs.SetInventory(proto.SectionDisks, json.RawMessage(`[`+hides("nvme0n1", "S0", 2)+`,`+hides("nvme1n1", "S1", 3)+`]`))
	endRamdisk := ramdisk.session(context.Background(), rs)
	defer func() { endRamdisk() }()
	f.wait("the ramdisk's disks", func() bool {
		return strings.Contains(f.inventorySection(node, proto.SectionDisks), "nvme-namespace-detached")
	})
	if get, _ := warned(); len(get) != 2 {
		t.Fatalf("after the ramdisk's report metal.get warns %q; want nvme0n1 and nvme1n1", get)
	}

	// bcd node reports the disks in its hello, then again on its session.
	osDisks := func(model string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`[
			{"name":"nvme0n1","serial":"S0","sizeBytes":1073741824,"model":%q,"transport":"nvme","erase":{"discard":true,"writeZeroes":true}},
			{"name":"nvme1n1","serial":"S1","sizeBytes":1073741824,"transport":"nvme","erase":{"discard":true,"writeZeroes":true,"firmware":{"nvmeFormat":true}}}]`, model))
	}
	installed := f.newAgent(node, m.nodeCreds)
	ns := installed.start()
	ns.SetInventory(proto.SectionDisks, osDisks("in the hello"))
	endInstalled := installed.session(context.Background(), ns)
	defer func() { endInstalled() }()
	for _, model := range []string{"in the hello", "on the session"} {
		if model != "in the hello" {
			ns.SetInventory(proto.SectionDisks, osDisks(model))
		}
		f.wait("bcd node's disks "+model, func() bool { return strings.Contains(f.inventorySection(node, proto.SectionDisks), model) })
		get, inventory := warned()
		for method, warnings := range map[string][]string{"metal.get": get, "metal.inventory": inventory} {
			if len(warnings) != 2 || !strings.HasPrefix(warnings[0], "disk nvme0n1 hides capacity no wipe reaches: nvme-namespace-detached 2") ||
				!strings.HasPrefix(warnings[1], "disk nvme1n1 hides capacity no wipe reaches: nvme-namespace-detached 3") {
				t.Errorf("after bcd node's report %s %s warns %q; want nvme0n1's and nvme1n1's hidden namespaces still", model, method, warnings)
			}
		}
		var stored []proto.DiskInfo
		f.must(json.Unmarshal([]byte(f.inventorySection(node, proto.SectionDisks)), &stored), "reading the disks")
		if len(stored) != 2 || stored[1].Erase.Firmware == nil || len(stored[1].Erase.Firmware.Hidden) != 1 {
			t.Errorf("the disks stored after bcd node's report %s: %+v; want its report with the ramdisk's firmware findings", model, stored)
		}
	}

	// A later inspection on the ramdisk finds the namespaces attached: no warning.
	rs.SetInventory(proto.SectionDisks, json.RawMessage(`[
		{"name":"nvme0n1","serial":"S0","sizeBytes":1140850688,"transport":"nvme","erase":{"discard":true,"writeZeroes":true,"firmware":{"nvmeFormat":true}}},
		{"name":"nvme1n1","serial":"S1","sizeBytes":1140850688,"transport":"nvme","erase":{"discard":true,"writeZeroes":true,"firmware":{"nvmeFormat":true}}}]`))
	f.wait("the inspection's disks", func() bool {
		return !strings.Contains(f.inventorySection(node, proto.SectionDisks), "nvme-namespace-detached")
	})
	if get, inventory := warned(); len(get) != 0 || len(inventory) != 0 {
		t.Errorf("after an inspection that finds no hidden capacity metal.get warns %q, metal.inventory %q; want none", get, inventory)
	}
}
