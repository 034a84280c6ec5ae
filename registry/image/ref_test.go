package image

import (
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

func FuzzParseUseRef(f *testing.F) {
	for _, s := range []string{"os@1", "acme/os@1", "/os@1", "Acme/os@1", "acme/b/os@1", "acme/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		owner, r, err := ParseUseRef(s)
		if err != nil {
			if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "ref" {
				t.Fatalf("%q: %v is not INVALID_INPUT at ref", s, err)
			}
			return
		}
		spelled := r.String()
		if owner != "" {
			spelled = owner + "/" + spelled
		}
		if spelled != s || strings.Count(s, "/") > 1 || owner != "" && !proto.ValidTenantName(owner) {
			t.Fatalf("%q parsed to %q / %q", s, owner, r)
		}
	})
}
