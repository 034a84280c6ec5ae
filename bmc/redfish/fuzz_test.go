package redfish

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
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

// acted are the requests Insert, Eject, SetBootDevice and SetPower make, which a fuzzed
// BMC answers: the resources they read, the PATCH of the boot override and the actions.
var acted = []struct{ method, path string }{
	{http.MethodGet, "/redfish/v1/Systems"},
	{http.MethodGet, "/redfish/v1/Systems/1"},
	{http.MethodGet, "/redfish/v1/Systems/1/ResetActionInfo"},
	{http.MethodGet, "/redfish/v1/Managers/1"},
	{http.MethodGet, "/redfish/v1/Managers/1/VirtualMedia"},
	{http.MethodGet, "/redfish/v1/Managers/1/VirtualMedia/CD1"},
	{http.MethodGet, "/redfish/v1/Managers/1/VirtualMedia/Floppy1"},
	{http.MethodPost, "/redfish/v1/Managers/1/VirtualMedia/CD1/Actions/VirtualMedia.InsertMedia"},
	{http.MethodPost, "/redfish/v1/Managers/1/VirtualMedia/CD1/Actions/VirtualMedia.EjectMedia"},
	{http.MethodPatch, "/redfish/v1/Systems/1"},
	{http.MethodPost, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"},
}

// elsewhereMark in a fuzzed body becomes the address of another host, for the BMC to
// name it.
const elsewhereMark = "ELSEWHERE"

// FuzzMediaAndBoot has a BMC answer any body with any of a few statuses for one of the
// requests the driver makes to mount and eject an image, set the boot override and
// power the machine on and off, then does each: nothing may panic or connect to a host
// the BMC names; a failure is DRIVER_ERROR, UNSUPPORTED or TIMEOUT (or, for the systems
// collection, INVALID_CONFIG naming options.system), its BMC text bounded.
func FuzzMediaAndBoot(f *testing.F) {
	sim := redfishsim.New(redfishsim.Config{Username: user, Password: password, Advertise: redfishsim.InActionInfo})
	f.Cleanup(sim.Close)
	at, reached := elsewhere(f)
	cfg := pinned(f, strings.TrimPrefix(sim.URL, "https://"), sim.Certificate.PublicKey, "1ms", "50ms")
	d, err := Open(context.Background(), cfg, bmc.Env{Credentials: credentials})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { d.Close() })
	const cd = "/redfish/v1/Managers/1/VirtualMedia/CD1"
	for _, seed := range []struct {
		request int
		status  int
		body    string
	}{
		{0, 0, `{"Members":null}`}, {0, 0, `{"Members":[{}]}`}, {0, 0, `{"Members":[null]}`},
		{1, 0, `{"Id":"1","Links":null,"Actions":null,"Boot":null}`},
		{1, 0, `{"Id":"1","Links":{"ManagedBy":null}}`},
		{1, 0, `{"Id":"1","Links":{"ManagedBy":[null,{}]},"VirtualMedia":{"@odata.id":"/redfish/v1/Managers/1/VirtualMedia"}}`},
		{1, 0, `{"Id":"1","Actions":{"#ComputerSystem.Reset":null}}`},
		{1, 0, `{"Id":"1","Actions":{"#ComputerSystem.Reset":{"target":null,"@Redfish.ActionInfo":null}}}`},
		{1, 0, `{"Id":"1","Actions":{"#ComputerSystem.Reset":{"target":"@ELSEWHERE/x"}}}`},
		{1, 0, `{"Id":"1","Boot":{"BootSourceOverrideTarget@Redfish.AllowableValues":null}}`},
		{1, 0, `{"Id":"1","Boot":{"BootSourceOverrideTarget@Redfish.AllowableValues":["Hdd"]}}`},
		{1, 0, `{"Id":"1","PowerState":"On","Boot":{"BootSourceOverrideTarget@Redfish.AllowableValues":[{}]}}`},
		{2, 0, `{"Parameters":null}`}, {2, 0, `{"Parameters":[null,{"Name":"ResetType","AllowableValues":null}]}`},
		{2, 0, `{"Parameters":[{"Name":"ResetType","AllowableValues":["Nmi"]}]}`},
		{3, 0, `{"Id":"1","VirtualMedia":null}`}, {3, 0, `{"Id":"1","VirtualMedia":{}}`},
		{3, 0, `{"Id":"1","VirtualMedia":{"@odata.id":"@ELSEWHERE/x"}}`},
		{4, 0, `{"Members":null}`}, {4, 0, `{"Members":[{}]}`}, {4, 0, `{"Members":[null]}`},
		{4, 0, `{"Members":[{"@odata.id":"` + cd + `"},{"@odata.id":"` + cd + `"}]}`},
		{5, 0, `{"MediaTypes":["CD"],"Actions":null}`},
		{5, 0, `{"@odata.id":"` + cd + `","MediaTypes":["CD"],"Inserted":true,"Image":"https://x/y.iso","Actions":{"#VirtualMedia.EjectMedia":{"target":null}}}`},
		{5, 0, `{"Id":"CD1","MediaTypes":["DVD"],"Actions":{"#VirtualMedia.InsertMedia":{"target":"@ELSEWHERE/x"}}}`},
		{5, 0, `{"Id":"CD1","MediaTypes":null,"Inserted":null}`},
		{6, 0, `{"Id":"Floppy1","MediaTypes":["CD"],"Actions":{}}`},
		{7, 0, `{}`}, {7, 1, `{"error":null}`}, {7, 3, `<html>busy</html>`},
		{8, 2, `{"error":{"@Message.ExtendedInfo":[null,{}]}}`}, {8, 0, `null`},
		{9, 0, `{"Boot":null}`}, {9, 1, `{"error":{"code":"x","message":"` + strings.Repeat("m", 2000) + `"}}`},
		{10, 0, `[]`}, {10, 3, ``},
		{1, 0, `null`}, {5, 0, ``}, {5, 0, `[]`},
	} {
		f.Add(uint8(seed.request), uint8(seed.status), []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, which, status uint8, body []byte) {
		r := acted[int(which)%len(acted)]
		sim.AnswerRequest(r.method, r.path, answeredStatuses[int(status)%len(answeredStatuses)], bytes.ReplaceAll(body, []byte(elsewhereMark), []byte(at)))
		defer sim.AnswerRequest(r.method, r.path, 0, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, do := range []func() error{
			func() error { return d.Insert(ctx, "https://images.example/boot.iso") },
			func() error { return d.Eject(ctx) },
			func() error { return d.SetBootDevice(ctx, proto.BootDevicePXE, true) },
			func() error { return d.SetBootDevice(ctx, proto.BootDevicePXE, false) },
			func() error { return d.SetPower(ctx, proto.PowerActionOn) },
			func() error { return d.SetPower(ctx, proto.PowerActionOff) },
		} {
			checkAnswerErr(t, r.path, do(), proto.Unsupported)
		}
		if n := reached.Load(); n != 0 {
			t.Fatalf("%s %s answered %q: the driver connected to %s, which the BMC named, %d times", r.method, r.path, body, at, n)
		}
	})
}

// checkAnswerErr fails unless err is nil or a driver's refusal of a BMC's answer: also
// one of the codes also.
func checkAnswerErr(t *testing.T, path string, err error, also ...proto.Code) {
	t.Helper()
	if err == nil {
		return
	}
	e := proto.AsError(err)
	switch {
	case e.Code == proto.InvalidConfig && e.Details.Path == "options.system" && path == answeredPaths[0]:
	case e.Code == proto.DriverError || e.Code == proto.Timeout || slices.Contains(also, e.Code):
	default:
		t.Fatalf("%s: %v (%s), want DRIVER_ERROR", path, err, e.Code)
	}
	if len(e.Message) > 2*maxMessage {
		t.Fatalf("%s: an error of %d bytes: the BMC's text is not bounded: %s", path, len(e.Message), e.Message)
	}
}

// TestBMCNamesBounded: the names a BMC gives (allowable values, a reported override, a
// manager's Id), quoted in an error, are clipped as its messages are: a BMC that
// answers megabytes must not have them carried into every log and reply.
func TestBMCNamesBounded(t *testing.T) {
	long := strings.Repeat("x", 4000)
	cases := map[string]struct {
		method, path, body string
		do                 func(context.Context, bmc.Driver) error
	}{
		"boot targets": {http.MethodGet, "/redfish/v1/Systems/1", `{"Id":"1","Boot":{"BootSourceOverrideTarget@Redfish.AllowableValues":["` + long + `","` + long + `"]}}`,
			func(ctx context.Context, d bmc.Driver) error { return d.SetBootDevice(ctx, proto.BootDevicePXE, true) }},
		"reported target": {http.MethodGet, "/redfish/v1/Systems/1", `{"@odata.id":"/redfish/v1/Systems/1","Id":"1","Boot":{"BootSourceOverrideTarget":"` + long + `","BootSourceOverrideEnabled":"` + long + `"}}`,
			func(ctx context.Context, d bmc.Driver) error { return d.SetBootDevice(ctx, proto.BootDevicePXE, true) }},
		"reset types": {http.MethodGet, "/redfish/v1/Systems/1/ResetActionInfo", `{"Parameters":[{"Name":"ResetType","AllowableValues":["` + long + `","` + long + `"]}]}`,
			func(ctx context.Context, d bmc.Driver) error { return d.SetPower(ctx, proto.PowerActionOn) }},
		"manager id": {http.MethodGet, "/redfish/v1/Managers/1", `{"Id":"` + long + `","VirtualMedia":{"@odata.id":"/redfish/v1/Managers/1/Missing"}}`,
			func(ctx context.Context, d bmc.Driver) error { return d.Insert(ctx, "https://images.example/boot.iso") }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sim := newSim(t, redfishsim.Config{Advertise: redfishsim.InActionInfo})
			d := open(t, config(t, sim))
			sim.AnswerRequest(tc.method, tc.path, http.StatusOK, []byte(tc.body))
			err := tc.do(context.Background(), d)
			if err == nil {
				t.Fatal("no error")
			}
			checkAnswerErr(t, tc.path, err, proto.Unsupported)
		})
	}
}
