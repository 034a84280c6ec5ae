package metal

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/google/go-cmp/cmp"
)

// TestRamdiskExtras: a pool's policy.ramdiskExtras go into boot.prepareRamdisk by ref
// and digest, in order, only when each is an image of kind ramdisk that verifies (never
// let through unsigned, whatever the registry allows OS images) and that the site's
// cache holds; otherwise the step fails with why, at the ref's path, and the site is
// never asked to boot the machine.
func TestRamdiskExtras(t *testing.T) {
	dcgm := Image{ID: "img_2", Tenant: "acme", Ref: "nvidia-dcgm@2026.09", Kind: "ramdisk", Format: "raw", Compression: "none",
		SHA256: strings.Repeat("ab", 32), Source: "https://images.example/nvidia-dcgm.cpio.gz"}
	tools := Image{ID: "img_3", Tenant: "acme", Ref: "tools@1", Kind: "ramdisk", Format: "raw", Compression: "none",
		SHA256: strings.Repeat("cd", 32), Source: "https://images.example/tools.cpio.gz"}
	own := Image{ID: "img_4", Tenant: "acme", Ref: "own-initrd@1", Kind: "os", Format: "raw", Compression: "none",
		SHA256: strings.Repeat("ef", 32), Source: "https://images.example/own.cpio.gz"}
	cases := map[string]struct {
		extras    []string
		verifyErr error
		uncached  string
		want      []proto.RamdiskExtra
		code      proto.Code
		reason    string
		path      string
	}{
		"verified and cached, in order": {extras: []string{"tools@1", "nvidia-dcgm@2026.09"},
			want: []proto.RamdiskExtra{{Ref: "tools@1", Digest: tools.SHA256}, {Ref: "nvidia-dcgm@2026.09", Digest: dcgm.SHA256}}},
		"a tenant's own OS image": {extras: []string{"nvidia-dcgm@2026.09", "own-initrd@1"},
			code: proto.InvalidState, reason: proto.ReasonNotRamdisk, path: "policy.ramdiskExtras[1]"},
		"unsigned": {extras: []string{"nvidia-dcgm@2026.09"}, verifyErr: proto.Errorf(proto.InvalidState, "image nvidia-dcgm@2026.09 is not signed").WithReason("unsigned"),
			code: proto.InvalidState, reason: "unsigned", path: "policy.ramdiskExtras[0]"},
		"signed by a tenant's key": {extras: []string{"nvidia-dcgm@2026.09"}, verifyErr: proto.Errorf(proto.InvalidState, "its signer is not on the platform's allowlist").WithReason("signature"),
			code: proto.InvalidState, reason: "signature", path: "policy.ramdiskExtras[0]"},
		"not in the catalog": {extras: []string{"missing@1"}, code: proto.NotFound, path: "policy.ramdiskExtras[0]"},
		"not cached yet":     {extras: []string{"nvidia-dcgm@2026.09"}, uncached: "nvidia-dcgm@2026.09", code: proto.InvalidState, reason: proto.ReasonNotCached, path: "policy.ramdiskExtras[0]"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			for _, img := range []Image{dcgm, tools, own} {
				h.images.images[img.Ref] = img
			}
			h.images.uncached = map[string]bool{tc.uncached: true}
			node := h.enroll(nil)
			policy := store.PoolPolicy{HardwareProfile: "gpu-redfish", RamdiskExtras: tc.extras}
			h.setPolicy(policy)
			h.images.verifyErr, h.images.verified = tc.verifyErr, nil
			run, _, err := h.act(node, Inspect, Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, n := h.end(run.ID)
			prepared := h.machine.received(proto.CommandPrepareRamdisk)
			if tc.code != "" {
				if len(prepared) != 0 {
					t.Errorf("the site was asked to boot the machine: %s", prepared[0].Input)
				}
				if n.Failure == nil {
					t.Fatalf("node %s did not fail", n.State)
				}
				e := n.Failure.Error
				if got := [3]string{string(e.Code), e.Details.Reason, e.Details.Path}; got != [3]string{string(tc.code), tc.reason, tc.path} {
					t.Errorf("failure %v (%s), want %s %s at %s", got, e.Message, tc.code, tc.reason, tc.path)
				}
				return
			}
			if len(prepared) != 1 {
				t.Fatalf("boot.prepareRamdisk sent %d times", len(prepared))
			}
			var in proto.PrepareRamdisk
			if err := json.Unmarshal([]byte(prepared[0].Input), &in); err != nil {
				t.Fatalf("%v: %s", err, prepared[0].Input)
			}
			if diff := cmp.Diff(tc.want, in.Extras); diff != "" {
				t.Errorf("extras (-want +got):\n%s", diff)
			}
			for _, v := range h.images.verified {
				if strings.HasSuffix(v, "allowUnsigned=true") {
					t.Errorf("an extra initrd verified as %s", v)
				}
			}
		})
	}
}

// TestRamdiskSecureBoot: a pool's policy.secureBoot goes into boot.prepareRamdisk, so
// that the site boots the machine through the signed chain; a pool without it asks
// for iPXE as before.
func TestRamdiskSecureBoot(t *testing.T) {
	for _, secure := range []bool{true, false} {
		h := newHarness(t)
		node := h.enroll(nil)
		h.setPolicy(store.PoolPolicy{HardwareProfile: "gpu-redfish", SecureBoot: secure})
		run, _, err := h.act(node, Inspect, Options{})
		if err != nil {
			t.Fatal(err)
		}
		h.end(run.ID)
		prepared := h.machine.received(proto.CommandPrepareRamdisk)
		if len(prepared) != 1 {
			t.Fatalf("boot.prepareRamdisk sent %d times", len(prepared))
		}
		var in proto.PrepareRamdisk
		if err := json.Unmarshal([]byte(prepared[0].Input), &in); err != nil {
			t.Fatalf("%v: %s", err, prepared[0].Input)
		}
		if in.SecureBoot != secure {
			t.Errorf("pool with secureBoot %v: boot.prepareRamdisk says %v", secure, in.SecureBoot)
		}
	}
}
