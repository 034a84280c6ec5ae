package redfish

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
)

// hugeAnswer is how much a hostile BMC answers in TestHugeAnswerBounded: what the site
// agent would hold were it read whole.
const hugeAnswer = 256 << 20

// TestHugeAnswerBounded: a BMC that answers a request (the service root, a login, the
// system, a collection, a part of the inventory, an action) with hundreds of MiB, an
// endless string or an endless list of members, fails the call with DRIVER_ERROR naming
// the request and the bound, and the site agent allocates a bounded amount for it, not
// the body: the agent answers DHCP, TFTP and HTTP boot for the whole rack.
func TestHugeAnswerBounded(t *testing.T) {
	const system = "/redfish/v1/Systems/1"
	endless := func(head, unit string) redfishsim.Stream {
		return redfishsim.Stream{Head: []byte(head), Unit: []byte(unit), Size: hugeAnswer}
	}
	cases := []struct {
		name, method, path string
		status             int
		stream             redfishsim.Stream
		call               func(d bmc.Driver) error
	}{
		{"service root", http.MethodGet, "/redfish/v1/", http.StatusOK, endless(`{"Id":"`, "a"), nil},
		{"login refused at length", http.MethodPost, "/redfish/v1/SessionService/Sessions", http.StatusUnauthorized, endless(`{"error":{"message":"`, "a"), nil},
		{"system", http.MethodGet, system, http.StatusOK, endless(`{"Id":"`, "a"), getPower},
		{"systems, endless members", http.MethodGet, "/redfish/v1/Systems", http.StatusOK, endless(`{"Members":[`, `{"@odata.id":"/redfish/v1/Systems/1"},`), getPower},
		{"system, an error at length", http.MethodGet, system, http.StatusInternalServerError, endless(`{"error":{"message":"`, "a"), getPower},
		{"memory", http.MethodGet, system + "/Memory", http.StatusOK, endless(`{"Members":[`, `{"@odata.id":"/redfish/v1/Systems/1/Memory/DIMM_A1"},`), inspectAll},
		{"reset", http.MethodPost, system + "/Actions/ComputerSystem.Reset", http.StatusBadRequest, endless(`{"error":{"message":"`, "a"), func(d bmc.Driver) error { return d.SetPower(context.Background(), proto.PowerActionOn) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sim := newSim(t, redfishsim.Config{})
			var d bmc.Driver
			if tc.call != nil {
				d = open(t, config(t, sim))
			}
			sim.AnswerStream(tc.method, tc.path, tc.status, tc.stream)
			var err error
			grew := allocated(func() {
				if tc.call == nil {
					_, err = Open(context.Background(), config(t, sim), bmc.Env{Credentials: credentials})
				} else {
					err = tc.call(d)
				}
			})
			t.Logf("allocated %d MiB for a %d MiB answer", grew>>20, hugeAnswer>>20)
			if grew > 4*maxBody {
				t.Fatalf("the driver allocated %d MiB for a BMC's answer of %d MiB; the bound is %d MiB", grew>>20, hugeAnswer>>20, 4*maxBody>>20)
			}
			want := fmt.Sprintf("%s %s answered more than %d MiB", tc.method, tc.path, maxBody>>20)
			checkErr(t, err, proto.DriverError, want)
			if !strings.Contains(err.Error(), "redfish 127.0.0.1:") || !strings.Contains(err.Error(), "check or update the BMC's firmware") {
				t.Fatalf("%v: want the BMC's host and what to do", err)
			}
		})
	}
}

// allocated is the bytes the process allocated while f ran: the most its heap grew.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func getPower(d bmc.Driver) error {
	_, err := d.GetPower(context.Background())
	return err
}

// inspectAll fails with the first part of the inventory left unread, as an error.
func inspectAll(d bmc.Driver) error {
	inv, err := d.Inspect(context.Background())
	if err == nil && len(inv.Unread) > 0 {
		err = proto.Errorf(proto.DriverError, "%s", inv.Unread[0].Error)
	}
	return err
}
