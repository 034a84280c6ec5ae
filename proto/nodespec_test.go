package proto

import (
	"errors"
	"strings"
	"testing"
)

func TestNodeSpecValidate(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	site := func(e BootEntry) *NodeSpec {
		return &NodeSpec{Node: "site-1", Role: RoleSite, Site: &SiteSpec{BootEntries: []BootEntry{e}}}
	}
	cases := map[string]struct {
		spec *NodeSpec
		path string // empty: valid
	}{
		"node":            {spec: &NodeSpec{Node: "gpu-01", Role: RoleNode, Host: []HostUnit{{Unit: "sysctl"}}}},
		"bad node id":     {spec: &NodeSpec{Node: "a/b", Role: RoleNode}, path: "node"},
		"bad role":        {spec: &NodeSpec{Node: "n", Role: "admin"}, path: "role"},
		"negative gen":    {spec: &NodeSpec{Node: "n", Role: RoleNode, Generation: -1}, path: "generation"},
		"unnamed driver":  {spec: &NodeSpec{Node: "n", Role: RoleNode, Drivers: map[string]DriverBinding{"power": {}}}, path: "drivers.power.driver"},
		"unnamed unit":    {spec: &NodeSpec{Node: "n", Role: RoleNode, Host: []HostUnit{{Unit: "cpu"}, {}}}, path: "host[1].unit"},
		"cache image":     {spec: &NodeSpec{Node: "s", Role: RoleSite, Site: &SiteSpec{CacheImages: []CacheImage{{Ref: "u@1", Digest: sum, Source: "https://x/y", Format: "raw"}}}}},
		"bad digest":      {spec: &NodeSpec{Node: "s", Role: RoleSite, Site: &SiteSpec{CacheImages: []CacheImage{{Ref: "u@1", Digest: "sha256:" + sum, Source: "https://x"}}}}, path: "site.cacheImages[0].digest"},
		"no source":       {spec: &NodeSpec{Node: "s", Role: RoleSite, Site: &SiteSpec{CacheImages: []CacheImage{{Ref: "u@1", Digest: sum}}}}, path: "site.cacheImages[0].source"},
		"disk entry":      {spec: site(BootEntry{Node: "m", MACs: []string{"52:54:00:ab:cd:ef"}, Kind: BootDisk})},
		"ramdisk entry":   {spec: site(BootEntry{Node: "m", MACs: []string{"52:54:00:ab:cd:ef"}, Kind: BootRamdisk, Ramdisk: &RamdiskBoot{Token: "bcj_x.y", Registry: "https://r:7443", Pins: []string{"sha256/a", "sha256/b", "sha256/c"}}})},
		"ramdisk missing": {spec: site(BootEntry{Node: "m", MACs: []string{"52:54:00:ab:cd:ef"}, Kind: BootRamdisk}), path: "site.bootEntries[0].ramdisk"},
		"sanboot missing": {spec: site(BootEntry{Node: "m", MACs: []string{"52:54:00:ab:cd:ef"}, Kind: BootSanboot, Sanboot: &Sanboot{}}), path: "site.bootEntries[0].sanboot"},
		"upper-case MAC":  {spec: site(BootEntry{Node: "m", MACs: []string{"52:54:00:AB:CD:EF"}, Kind: BootDisk}), path: "site.bootEntries[0].macs[0]"},
		"no MAC":          {spec: site(BootEntry{Node: "m", Kind: BootDisk}), path: "site.bootEntries[0].macs"},
		"unknown kind":    {spec: site(BootEntry{Node: "m", MACs: []string{"52:54:00:ab:cd:ef"}, Kind: "floppy"}), path: "site.bootEntries[0].kind"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.spec.Validate()
			if tc.path == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			e, ok := errors.AsType[*Error](err)
			if !ok || e.Code != InvalidConfig || e.Details.Path != tc.path {
				t.Fatalf("got %v, want INVALID_CONFIG at %s", err, tc.path)
			}
		})
	}
}
