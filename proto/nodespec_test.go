package proto

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestNodeSpecValidate(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	site := func(e BootEntry) *NodeSpec {
		return &NodeSpec{Node: "site-1", Role: RoleSite, Site: &SiteSpec{BootEntries: []BootEntry{e}}}
	}
	known := func(macs ...string) *NodeSpec {
		return &NodeSpec{Node: "site-1", Role: RoleSite, Site: &SiteSpec{KnownMACs: macs}}
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
		"known MACs":      {spec: known("52:54:00:00:00:01", "52:54:00:00:00:02")},
		"known upper":     {spec: known("52:54:00:00:00:01", "52:54:00:AB:CD:EF"), path: "site.knownMacs[1]"},
		"known unsorted":  {spec: known("52:54:00:00:00:02", "52:54:00:00:00:01"), path: "site.knownMacs[1]"},
		"known twice":     {spec: known("52:54:00:00:00:01", "52:54:00:00:00:01"), path: "site.knownMacs[1]"},
		"known too many":  {spec: known(manyMACs(MaxKnownMACs + 1)...), path: "site.knownMacs"},
		"known at most":   {spec: known(manyMACs(MaxKnownMACs)...)},
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

// manyMACs is n distinct MACs, sorted.
func manyMACs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)
	}
	return out
}

// FuzzNodeSpecValidate checks any NodeSpec the registry could push: Validate refuses it as
// INVALID_CONFIG with a path, or it is still valid after a JSON round trip; each boot
// entry's Check agrees with Validate, as INVALID_INPUT at bootEntry.
func FuzzNodeSpecValidate(f *testing.F) {
	sum := strings.Repeat("ab", 32)
	for _, s := range []string{
		`{"node":"gpu-01","role":"node","generation":3,"host":[{"unit":"sysctl","settings":{"vm.swappiness":1}}],"drivers":{"power":{"driver":"redfish"}}}`,
		`{"node":"s","role":"site","site":{"cacheImages":[{"ref":"u@1","digest":"` + sum + `","source":"https://x/y","format":"raw"}]}}`,
		`{"node":"s","role":"site","site":{"bootEntries":[{"node":"m","macs":["52:54:00:ab:cd:ef"],"kind":"ramdisk","ramdisk":{"token":"bcj_x.y","registry":"https://r:7443","pins":["sha256/a","sha256/b","sha256/c"]}}]}}`,
		`{"node":"s","role":"site","site":{"bootEntries":[{"node":"m","macs":["52:54:00:AB:cd:ef"],"kind":"sanboot","sanboot":{"image":"` + sum + `"}}]}}`,
		`{"node":"Rack:A","role":"ramdisk","generation":-1}`,
		`{"node":"s","role":"site","site":{"knownMacs":["52:54:00:ab:cd:ef","52:54:00:ab:cd:f0"]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var spec NodeSpec
		if json.Unmarshal(doc, &spec) != nil {
			return
		}
		err := spec.Validate()
		if err != nil {
			if e := AsError(err); e.Code != InvalidConfig || e.Details.Path == "" {
				t.Fatalf("error %v is not INVALID_CONFIG with a path", err)
			}
		} else {
			text, err := json.Marshal(&spec)
			if err != nil {
				t.Fatal(err)
			}
			var again NodeSpec
			if err := json.Unmarshal(text, &again); err != nil {
				t.Fatal(err)
			}
			if err := again.Validate(); err != nil {
				t.Fatalf("%s is valid, its encoding %s is not: %v", doc, text, err)
			}
		}
		if spec.Site == nil {
			return
		}
		for i, e := range spec.Site.BootEntries {
			err := e.Check()
			other := e.validate(fmt.Sprintf("site.bootEntries[%d]", i))
			if (err == nil) != (other == nil) {
				t.Fatalf("Check %v disagrees with Validate %v", err, other)
			}
			if err != nil {
				if pe := AsError(err); pe.Code != InvalidInput || !strings.HasPrefix(pe.Details.Path, "bootEntry") {
					t.Fatalf("Check error %v is not INVALID_INPUT at bootEntry", err)
				}
			}
		}
	})
}
