package redfish

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

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
			bound := uint64(4 * maxBody) // the process's: the simulator's writes are in it too
			if raceDetector {
				bound *= 2
			}
			if grew > bound {
				t.Fatalf("the driver allocated %d MiB for a BMC's answer of %d MiB; the bound is %d MiB", grew>>20, hugeAnswer>>20, bound>>20)
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

// TestCollectionBounded: a BMC that lists more members than any server has parts, each
// answered inline (no request of its own to slow it), or that links one more page of a
// collection after another without end (here, the collection itself as its next page,
// plainly or with a fragment), leaves that part of the inventory unread with
// DRIVER_ERROR naming the bound, and only that part (the bounds are the call's, and a
// page refused is not counted against the parts read after it): gofish
// reads a goroutine a member, and follows pages by a recursion that, unwinding, copies
// the members of every page below it (the read went on minutes past its context).
func TestCollectionBounded(t *testing.T) {
	const memory = "/redfish/v1/Systems/1/Memory"
	many := `{"Members":[` + strings.Repeat(`{"@odata.id":"`+memory+`/D","Id":"D","CapacityMiB":1},`, maxMembers) + `{"@odata.id":"` + memory + `/D","Id":"D"}]}`
	cases := map[string]struct{ body, text string }{
		"members": {body: many, text: fmt.Sprintf("the collection lists over %d members with those read before it", maxMembers)},
		"pages":   {body: `{"Members":[{"@odata.id":"` + memory + `/D","Id":"D"}],"Members@odata.nextLink":"` + memory + `"}`, text: fmt.Sprintf("links a page after %d pages", maxPages)},
		// The same page linked with a fragment, which the request leaves out: a count kept
		// by the link's text would start again at each page.
		"pages linked with a fragment": {body: `{"Members":[{"@odata.id":"` + memory + `/D","Id":"D"}],"Members@odata.nextLink":"` + memory + `#next"}`, text: fmt.Sprintf("links a page after %d pages", maxPages)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sim := newSim(t, redfishsim.Config{})
			d := open(t, config(t, sim))
			sim.Answer(memory, http.StatusOK, []byte(tc.body))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan error, 1)
			var inv proto.OOBInventory
			go func() {
				var err error
				inv, err = d.Inspect(ctx)
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil || len(inv.Unread) != 1 || inv.Unread[0].Part != "memory" || !strings.Contains(inv.Unread[0].Error, tc.text) {
					t.Fatalf("%v, %d DIMMs, unread %+v; want memory unread: %s", err, len(inv.Memory.Modules), inv.Unread, tc.text)
				}
			case <-time.After(time.Minute):
				t.Fatalf("the inventory read still runs 40s after its context ended")
			}
		})
	}
}

// TestStalledBMCBounded: a BMC that accepts the connection and never answers, or
// answers one byte after another without end, holds a call no longer than its context:
// TIMEOUT, naming what was asked; and Close, which logs out after the step, returns all
// the same (bounded by logoutTimeout). The deadline is the test's guard, not what it
// asserts.
func TestStalledBMCBounded(t *testing.T) {
	const system = "/redfish/v1/Systems/1"
	stalled := redfishsim.Stream{Delay: time.Hour}
	trickle := redfishsim.Stream{Head: []byte(`{"Id":"`), Unit: []byte("a"), Size: -1, Every: 50 * time.Millisecond}
	cases := []struct {
		name, method, path string
		stream             redfishsim.Stream
		call               func(ctx context.Context, d bmc.Driver) error
		text               string
	}{
		{"service root, no headers", http.MethodGet, "/redfish/v1/", stalled, nil, "read the service root"},
		{"login, no headers", http.MethodPost, "/redfish/v1/SessionService/Sessions", stalled, nil, "log in as operator"},
		{"system, no headers", http.MethodGet, system, stalled, func(ctx context.Context, d bmc.Driver) error { _, err := d.GetPower(ctx); return err }, "list systems"},
		{"system, trickled", http.MethodGet, system, trickle, func(ctx context.Context, d bmc.Driver) error { _, err := d.GetPower(ctx); return err }, "list systems"},
		{"a drive, trickled", http.MethodGet, system + "/Storage/1/Drives/Disk.0", trickle, func(ctx context.Context, d bmc.Driver) error { _, err := d.Inspect(ctx); return err }, "read the drives of storage 1"},
		{"reset, no headers", http.MethodPost, system + "/Actions/ComputerSystem.Reset", stalled, func(ctx context.Context, d bmc.Driver) error { return d.SetPower(ctx, proto.PowerActionOn) }, "reset On"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim := newSim(t, redfishsim.Config{})
			var d bmc.Driver
			if tc.call != nil {
				d = open(t, config(t, sim))
			}
			sim.AnswerStream(tc.method, tc.path, http.StatusOK, tc.stream)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				if tc.call == nil {
					_, err := Open(ctx, config(t, sim), bmc.Env{Credentials: credentials})
					done <- err
					return
				}
				done <- tc.call(ctx, d)
			}()
			select {
			case err := <-done:
				checkErr(t, err, proto.Timeout, tc.text)
			case <-time.After(time.Minute):
				t.Fatalf("the call still waits on the BMC a minute after its context ended")
			}
		})
	}
	t.Run("logout, no headers", func(t *testing.T) {
		t.Parallel()
		sim := newSim(t, redfishsim.Config{})
		d, err := Open(context.Background(), config(t, sim), bmc.Env{Credentials: credentials})
		if err != nil {
			t.Fatal(err)
		}
		sim.AnswerStream(http.MethodDelete, "/redfish/v1/SessionService/Sessions/1", http.StatusOK, stalled)
		done := make(chan error, 1)
		go func() { done <- d.Close() }()
		select {
		case err := <-done:
			checkErr(t, err, "", "")
		case <-time.After(logoutTimeout + time.Minute):
			t.Fatalf("Close still waits on the BMC a minute after logoutTimeout")
		}
	})
}

// TestMembersHeldBounded: a BMC that lists a few dozen members, each answered with a
// body just under maxBody, had the site agent hold all of them at once (gofish keeps
// each member whole with its body, and each failure with its body, until the
// collection's last member is read; the failures' bodies are read side by side): over
// a GiB for 24 members of the 4,096 allowed. Now the bodies the driver takes in for one
// read of the BMC are bounded at maxRead, the memory is left unread with DRIVER_ERROR
// naming the bound (and the parts read after it), and the agent holds a bounded amount.
func TestMembersHeldBounded(t *testing.T) {
	const memory = "/redfish/v1/Systems/1/Memory"
	const n = 24
	for name, status := range map[string]int{"answered": http.StatusOK, "failing": http.StatusInternalServerError} {
		t.Run(name, func(t *testing.T) {
			sim := newSim(t, redfishsim.Config{})
			d := open(t, config(t, sim))
			var links []string
			for i := range n {
				path := fmt.Sprintf("%s/DIMM%d", memory, i)
				head := `{"@odata.id":"` + path + `","Id":"DIMM` + fmt.Sprint(i) + `","CapacityMiB":1,"PartNumber":"`
				sim.Answer(path, status, []byte(head+strings.Repeat("a", maxBody-len(head)-2)+`"}`))
				links = append(links, `{"@odata.id":"`+path+`"}`)
			}
			sim.Answer(memory, http.StatusOK, []byte(`{"Members":[`+strings.Join(links, ",")+`]}`))
			var inv proto.OOBInventory
			var err error
			held := peakHeld(func() { inv, err = d.Inspect(context.Background()) })
			t.Logf("held at most %d MiB for %d members of %d MiB", held>>20, n, maxBody>>20)
			// Failing, the unread memory names the first member's failure, read side by side
			// with the others: its HTTP 500, or the bound.
			text := fmt.Sprintf("the answers to one read passed %d MiB", maxRead>>20)
			if status != http.StatusOK {
				text = ""
			}
			if err != nil || len(inv.Unread) == 0 || inv.Unread[0].Part != "memory" || !strings.Contains(inv.Unread[0].Error, text) {
				t.Fatalf("%v, %d DIMMs, unread %+v; want memory unread: %s", err, len(inv.Memory.Modules), inv.Unread, text)
			}
			// The simulator holds its n answers (n*maxBody) throughout: held counts beyond
			// them. A member is held about twice (its body, and the string it carries), and
			// the one being read is in buffers besides.
			if bound := uint64(6 * maxRead); held > bound {
				t.Fatalf("the driver held %d MiB for %d members of %d MiB; the bound is %d MiB", held>>20, n, maxBody>>20, bound>>20)
			}
		})
	}
}

// peakHeld is the most the live heap grew over what it was before f, sampled while f
// runs, each sample after a collection.
func peakHeld(f func()) uint64 {
	live := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := live()
	done := make(chan struct{})
	peak := make(chan uint64)
	go func() {
		var most uint64
		for {
			most = max(most, live())
			select {
			case <-done:
				peak <- most
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	f()
	close(done)
	most := <-peak
	if most < before {
		return 0
	}
	return most - before
}
