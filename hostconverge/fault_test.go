package hostconverge

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/better-compute/better-compute/hostconverge/kernel"
	"github.com/better-compute/better-compute/proto"
)

// TestUpdateGRUBFails: a failed update-grub leaves no drop-in that the next pass would
// take as applied, and the next pass tries again.
func TestUpdateGRUBFails(t *testing.T) {
	h := newFakeHost(t, kernelHost(), map[string]reply{"update-grub": {err: "exit status 1: /usr/sbin/grub-probe: error: failed to get canonical path of `overlay'."}})
	c := &Converger{Root: h.root, Runner: h}
	spec := Spec{Units: []Unit{{Name: "iommu", Settings: []byte(`{}`)}, {Name: "sysctl", Settings: []byte(`{"vm.swappiness": 10}`)}}}
	before := h.snapshot()
	results := c.Converge(context.Background(), spec)
	if diff := cmp.Diff([]brief{{"sysctl", Changed, "", false}, {"iommu", Failed, proto.DriverError, false}}, briefs(results)); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	if diff := fileDiff(before, h.snapshot()); strings.Contains(diff, kernel.DropIn("iommu")) {
		t.Errorf("the drop-in stayed after update-grub failed:\n%s", diff)
	}
	h.answer("update-grub", reply{})
	h.takeCalls()
	results = c.Converge(context.Background(), spec)
	if results[1].Status != RebootRequired || !slices.Contains(h.takeCalls(), "update-grub") {
		t.Errorf("the next pass did not apply the drop-in: %+v", results)
	}
}

// TestFileWhereDirectory: a file where a unit needs a directory fails that unit with the
// system's reason, and the others run.
func TestFileWhereDirectory(t *testing.T) {
	h := newFakeHost(t, with(kernelHost(), map[string]string{"/etc/modprobe.d": "not a directory\n"}), map[string]reply{"modprobe nvidia": {}})
	c := &Converger{Root: h.root, Runner: h}
	results := c.Converge(context.Background(), Spec{Units: []Unit{
		{Name: "kernel-modules", Settings: []byte(`{"load": ["nvidia"], "options": {"nvidia": "NVreg_EnableGpuFirmware=0"}}`)},
		{Name: "sysctl", Settings: []byte(`{"vm.swappiness": 10}`)},
	}})
	if diff := cmp.Diff([]brief{{"kernel-modules", Failed, proto.DriverError, false}, {"sysctl", Changed, "", false}}, briefs(results)); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	if want := "reading " + kernel.ModprobeOptions + ": not a directory"; results[0].Message != want {
		t.Errorf("message %q, want %q", results[0].Message, want)
	}
}
