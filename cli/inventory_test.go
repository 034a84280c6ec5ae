package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

func TestFirmwareEraseText(t *testing.T) {
	for want, f := range map[string]*proto.FirmwareErase{
		"-":                                     nil,
		"none":                                  {},
		"unknown (NVMe: NVME_IOCTL_ID)":         {Error: "NVMe: NVME_IOCTL_ID"},
		"format, crypto format, sanitize block": {NVMeFormat: true, NVMeFormatCrypto: true, NVMeSanitizeBlock: true},
		"security erase, (frozen)":              {ATASecurityErase: true, ATAFrozen: true},
	} {
		if got := firmwareEraseText(f); got != want {
			t.Errorf("%+v: %q, want %q", f, got, want)
		}
	}
}

// TestInventoryShowsHiddenCapacity: nodes inventory shows what each disk's device hides
// from a wipe ("-" where nobody asked, "none" where it hides nothing) and the registry's
// warnings after the sections.
func TestInventoryShowsHiddenCapacity(t *testing.T) {
	for want, f := range map[string]*proto.FirmwareErase{
		"-":    nil,
		"none": {NVMeFormat: true},
		"nvme-namespace-detached 2 (67108864 bytes), nvme-capacity-unallocated (1024 bytes)": {Hidden: []proto.HiddenCapacity{
			{Kind: proto.HiddenNVMeNamespace, NSID: 2, Bytes: 64 << 20}, {Kind: proto.HiddenNVMeUnallocated, Bytes: 1024}}},
		"unchecked (READ NATIVE MAX ADDRESS: EIO)": {Hidden: []proto.HiddenCapacity{{Kind: proto.HiddenUnchecked, Error: "READ NATIVE MAX ADDRESS: EIO"}}},
	} {
		if got := hiddenFromWipeText(f); got != want {
			t.Errorf("%+v: %q, want %q", f, got, want)
		}
	}
	var out strings.Builder
	w := tabwriter.NewWriter(&out, 0, 8, 2, ' ', 0)
	inventoryDetail(w, api.NodeInventory{NodeID: "nd_1", Warnings: []string{"disk nvme0n1 hides capacity no wipe reaches: nvme-namespace-detached 2 (67108864 bytes)"},
		Sections: []api.InventorySection{{Section: proto.SectionDisks, Data: json.RawMessage(
			`[{"name":"nvme0n1","sizeBytes":67108864,"transport":"nvme","erase":{"firmware":{"hidden":[{"kind":"nvme-namespace-detached","nsid":2,"bytes":67108864}]}}}]`)}}})
	w.Flush()
	for _, want := range []string{"HIDDEN FROM WIPE", "nvme-namespace-detached 2 (67108864 bytes)", "\nwarning: disk nvme0n1 hides capacity"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("nodes inventory does not show %q:\n%s", want, out.String())
		}
	}
}
