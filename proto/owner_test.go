package proto

import (
	"strings"
	"testing"
)

func TestSplitOwner(t *testing.T) {
	for s, want := range map[string][2]string{
		"gpu-host":       {"", "gpu-host"},
		"acme/gpu-host":  {"acme", "gpu-host"},
		"acme/os@1":      {"acme", "os@1"},
		"a-1/x/y":        {"a-1", "x/y"},
		"builtin/metal-": {"builtin", "metal-"},
	} {
		owner, name, err := SplitOwner(s)
		if err != nil || owner != want[0] || name != want[1] {
			t.Errorf("%q: %q %q %v, want %q %q", s, owner, name, err, want[0], want[1])
		}
	}
	for _, s := range []string{"/x", "Acme/x", "1acme/x", "acme_x/y", strings.Repeat("a", 64) + "/x"} {
		if _, _, err := SplitOwner(s); CodeOf(err) != InvalidInput {
			t.Errorf("%q: %v, want INVALID_INPUT", s, err)
		}
	}
}

func FuzzSplitOwner(f *testing.F) {
	for _, s := range []string{"gpu-host", "acme/gpu-host", "acme/os@1", "/", "a//", "A/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		owner, name, err := SplitOwner(s)
		switch {
		case err != nil:
			if !strings.Contains(s, "/") || CodeOf(err) != InvalidInput {
				t.Fatalf("%q: error %v", s, err)
			}
		case owner == "":
			if name != s || strings.Contains(s, "/") {
				t.Fatalf("%q read as unowned %q", s, name)
			}
		case !ValidTenantName(owner) || owner+"/"+name != s:
			t.Fatalf("%q read as %q / %q", s, owner, name)
		}
	})
}
