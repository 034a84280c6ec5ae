package redfish

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
)

// answeredPaths are the resources the driver reads, which a fuzzed BMC answers.
var answeredPaths = []string{
	"/redfish/v1/Systems",
	"/redfish/v1/Systems/1",
	"/redfish/v1/Systems/1/Processors",
	"/redfish/v1/Systems/1/Processors/CPU1",
	"/redfish/v1/Systems/1/Memory",
	"/redfish/v1/Systems/1/Memory/DIMM_A1",
	"/redfish/v1/Systems/1/EthernetInterfaces",
	"/redfish/v1/Systems/1/EthernetInterfaces/NIC.Integrated.1-1",
	"/redfish/v1/Systems/1/Storage",
	"/redfish/v1/Systems/1/Storage/1",
	"/redfish/v1/Systems/1/Storage/1/Drives/Disk.0",
	"/redfish/v1/Managers/1",
}

// answeredStatuses are the HTTP statuses a fuzzed answer comes with.
var answeredStatuses = []int{http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusInternalServerError}

// FuzzInspect has a BMC answer any body with any of a few statuses for one of the
// resources the driver reads, then inspects the machine and reads its power: nothing
// may panic or leave the BMC's host; a failure is DRIVER_ERROR, TIMEOUT or (for the
// systems collection) INVALID_CONFIG naming options.system, its BMC text bounded; a
// power state is one of the project's; and a garbled part leaves the system's own
// fields as the well-behaved BMC gave them.
func FuzzInspect(f *testing.F) {
	sim := redfishsim.New(redfishsim.Config{Username: user, Password: password, PowerState: "On"})
	f.Cleanup(sim.Close)
	d, err := Open(context.Background(), config(f, sim), bmc.Env{Credentials: credentials})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { d.Close() })
	want, err := d.Inspect(context.Background())
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []struct {
		path   int
		status int
		body   string
	}{
		{0, 0, `{"Members":[{"@odata.id":"/redfish/v1/Systems/1"},{"@odata.id":"/redfish/v1/Systems/2"}]}`},
		{0, 0, `{"Members":[{"@odata.id":"/redfish/v1/Systems"}]}`},
		{0, 0, `{"Members":[{"@odata.id":"@127.0.0.1:1/x"}]}`},
		{1, 0, `{"Id":"1","PowerState":"Blinking","MemorySummary":{"TotalSystemMemoryGiB":1e300}}`},
		{1, 0, `{"Id":"1","Processors":{"@odata.id":"/redfish/v1/Systems/1"},"Links":{"ManagedBy":[]}}`},
		{2, 0, `{"Members":[{"@odata.id":"/redfish/v1/Systems/1/Processors"}]}`},
		{3, 0, `{"Id":"CPU1","TotalCores":-1,"ProcessorType":"GPU"}`},
		{5, 0, `{"CapacityMiB":9007199254740993}`},
		{7, 0, `{"MACAddress":"ZZ","SpeedMbps":null}`},
		{9, 0, `{"Drives":[{"@odata.id":""}]}`},
		{11, 0, `{"Model":7}`},
		{1, 3, `{"error":{"code":"Base.1.8.InternalError","message":"x","@Message.ExtendedInfo":[{"Message":"` + string(make([]byte, 600)) + `"}]}}`},
		{4, 2, `<html>not found</html>`},
		{1, 0, `null`}, {1, 0, ``}, {1, 0, `[]`},
	} {
		f.Add(uint8(seed.path), uint8(seed.status), []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, which, status uint8, body []byte) {
		path := answeredPaths[int(which)%len(answeredPaths)]
		sim.Answer(path, answeredStatuses[int(status)%len(answeredStatuses)], body)
		defer sim.Answer(path, 0, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		inv, err := d.Inspect(ctx)
		checkAnswerErr(t, path, err)
		if err == nil && path != answeredPaths[0] && path != answeredPaths[1] && inv.System != want.System {
			t.Fatalf("%s answered %q: the system read %+v, want %+v", path, body, inv.System, want.System)
		}
		state, err := d.GetPower(ctx)
		checkAnswerErr(t, path, err)
		if err == nil && !slices.Contains([]proto.PowerState{proto.PowerStateOn, proto.PowerStateOff, proto.PowerStatePoweringOn, proto.PowerStatePoweringOff, proto.PowerStatePaused, proto.PowerStateUnknown}, state) {
			t.Fatalf("%s answered %q: power state %q", path, body, state)
		}
	})
}

// checkAnswerErr fails unless err is nil or a driver's refusal of a BMC's answer.
func checkAnswerErr(t *testing.T, path string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	e := proto.AsError(err)
	switch {
	case e.Code == proto.InvalidConfig && e.Details.Path == "options.system" && path == answeredPaths[0]:
	case e.Code == proto.DriverError || e.Code == proto.Timeout:
	default:
		t.Fatalf("%s: %v (%s), want DRIVER_ERROR", path, err, e.Code)
	}
	if len(e.Message) > 2*maxMessage {
		t.Fatalf("%s: an error of %d bytes: the BMC's text is not bounded: %s", path, len(e.Message), e.Message)
	}
}
