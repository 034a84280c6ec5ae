package metal

import (
	"encoding/json"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/google/go-cmp/cmp"
)

func TestCheckPoolPolicy(t *testing.T) {
	h := newHarness(t)
	cases := map[string]struct {
		policy store.PoolPolicy
		path   string
	}{
		"every unit field":            {everyUnit, ""},
		"a setting out of range":      {store.PoolPolicy{Hugepages: json.RawMessage(`{"pages1g":99999}`)}, "policy.hugepages.pages1g"},
		"an unknown setting":          {store.PoolPolicy{GPU: json.RawMessage(`{"clock":1}`)}, "policy.gpu.clock"},
		"not an object":               {store.PoolPolicy{CPU: json.RawMessage(`[]`)}, "policy.cpu"},
		"an unknown hardware profile": {store.PoolPolicy{HardwareProfile: "nope"}, "policy.hardwareProfile"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := h.svc.CheckPoolPolicy(tc.policy)
			if tc.path == "" && err != nil || tc.path != "" && (proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != tc.path) {
				t.Fatalf("got %v, want INVALID_INPUT at %q", err, tc.path)
			}
		})
	}
}

func TestPoolUnitsInTheOrderTheyApply(t *testing.T) {
	var got []string
	for _, u := range PoolUnits(everyUnit) {
		got = append(got, u.Unit)
	}
	want := []string{"kernel-modules", "hugepages", "cpu", "iommu", "gpu-settings", "gpu-sharing", "k8s-join"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("units (-want +got):\n%s", diff)
	}
}

// everyUnit is a policy that sets every unit field.
var everyUnit = store.PoolPolicy{Hugepages: json.RawMessage(`{"pages2m":1024}`), KernelModules: json.RawMessage(`{"load":["vfio_pci"]}`),
	CPU: json.RawMessage(`{"governor":"performance"}`), IOMMU: json.RawMessage(`{"passthrough":true}`), GPU: json.RawMessage(`{"powerLimitWatts":700}`),
	Kubernetes: json.RawMessage(`{"server":"https://k8s.example:6443","caCertSha256":"` + digest + `","tokenRef":"secret://k8s/join"}`),
	GPUSharing: json.RawMessage(`{"mode":"timeslice","replicas":2}`)}
