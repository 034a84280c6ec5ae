package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// TestEnrollBoundsTheMACs: metal.enroll, over HTTP, refuses a machine with more MACs
// than store.MaxNodeMACs INVALID_INPUT too-large at macs, and enrolls nothing; before, an
// enrollment the size of a request stored some 127,000, each an index entry. A machine
// with MaxNodeMACs is enrolled.
func TestEnrollBoundsTheMACs(t *testing.T) {
	st, srv, secret := enrollingServer(t)
	enroll := func(count, bmc int) string {
		macs := make([]string, count)
		for i := range macs {
			macs[i] = fmt.Sprintf(`"52:54:%02x:00:%02x:%02x"`, bmc, i>>8, i&0xff)
		}
		return `{"pool":"gpu","macs":[` + strings.Join(macs, ",") + `],"bmc":{"driver":"redfish","address":"https://10.0.0.` + fmt.Sprint(bmc) + `"}}`
	}

	for _, count := range []int{store.MaxNodeMACs + 1, 20000} {
		status, _, e := callAs(t, srv, secret, "metal.enroll", "application/json", enroll(count, 5))
		if status != http.StatusBadRequest || e.Code != proto.InvalidInput || e.Details.Path != "macs" || e.Details.Reason != proto.ReasonTooLarge {
			t.Errorf("%d MACs: %d %s at %q (%s), want INVALID_INPUT too-large at macs", count, status, e.Code, e.Details.Path, e.Message)
		}
	}
	if n := nodes(t, st); n != 0 {
		t.Fatalf("%d node(s) stored after enrollments of too many MACs, want none", n)
	}
	if status, _, e := callAs(t, srv, secret, "metal.enroll", "application/json", enroll(store.MaxNodeMACs, 6)); status != http.StatusOK {
		t.Fatalf("%d MACs: %d %s at %q: %s", store.MaxNodeMACs, status, e.Code, e.Details.Path, e.Message)
	}
	if n := nodes(t, st); n != 1 {
		t.Fatalf("%d node(s) stored after an enrollment of %d MACs, want 1", n, store.MaxNodeMACs)
	}
}
