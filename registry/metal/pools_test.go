package metal

import (
	"encoding/json"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

func TestSetPoolChecksItsUnits(t *testing.T) {
	h := newHarness(t)
	cases := map[string]struct {
		policy store.MetalPolicy
		path   string
	}{
		"every unit field":       {store.MetalPolicy{Hugepages: json.RawMessage(`{"pages2m":1024}`), KernelModules: json.RawMessage(`{"load":["vfio_pci"]}`), CPU: json.RawMessage(`{"governor":"performance"}`), IOMMU: json.RawMessage(`{"passthrough":true}`), GPU: json.RawMessage(`{"powerLimitWatts":700}`), Kubernetes: json.RawMessage(`{"server":"https://k8s.example:6443","caCertSha256":"` + digest + `","tokenRef":"secret://k8s/join"}`), GPUSharing: json.RawMessage(`{"mode":"timeslice","replicas":2}`)}, ""},
		"a setting out of range": {store.MetalPolicy{Hugepages: json.RawMessage(`{"pages1g":99999}`)}, "policy.hugepages.pages1g"},
		"an unknown setting":     {store.MetalPolicy{GPU: json.RawMessage(`{"clock":1}`)}, "policy.gpu.clock"},
		"not an object":          {store.MetalPolicy{CPU: json.RawMessage(`[]`)}, "policy.cpu"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := h.store.Update(func(tx *store.Tx) error {
				_, err := h.svc.SetPool(tx, store.MetalPool{Tenant: "acme", Name: "gpu", Site: "rack-a", Policy: tc.policy})
				return err
			})
			if tc.path == "" && err != nil || tc.path != "" && (proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != tc.path) {
				t.Fatalf("got %v, want INVALID_INPUT at %q", err, tc.path)
			}
		})
	}
}
