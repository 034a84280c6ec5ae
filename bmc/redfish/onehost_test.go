package redfish

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
)

// TestLinkToAnotherHostRefused: a BMC that links a resource on another host, by an
// @odata.id that turns the endpoint into a login ("@host:port/...") or by a redirect,
// must not make the driver connect there: the request would carry the session token, or
// with basic authentication the BMC's password, to whoever holds a certificate the
// driver trusts.
func TestLinkToAnotherHostRefused(t *testing.T) {
	at, reached := elsewhere(t)
	for name, answer := range map[string]func(*redfishsim.Server){
		"a member at a login": func(sim *redfishsim.Server) {
			sim.Answer("/redfish/v1/Systems", http.StatusOK, []byte(`{"Members":[{"@odata.id":"@`+at+`/redfish/v1/Systems/1"}]}`))
		},
		"a redirect": func(sim *redfishsim.Server) {
			sim.Redirect("/redfish/v1/Systems", "https://"+at+"/redfish/v1/Systems")
		},
	} {
		t.Run(name, func(t *testing.T) {
			for _, auth := range []string{"session", "basic"} {
				sim := newSim(t, redfishsim.Config{PowerState: "On"})
				cfg := config(t, sim)
				cfg.Options[optAuth] = auth
				d := open(t, cfg)
				answer(sim)
				_, err := d.GetPower(context.Background())
				if n := reached.Load(); n != 0 {
					t.Fatalf("auth %s: the driver connected to %s, which the BMC named, %d times", auth, at, n)
				}
				if e := proto.AsError(err); e.Code != proto.DriverError {
					t.Fatalf("auth %s: %v, want DRIVER_ERROR", auth, err)
				}
			}
		})
	}
}

// elsewhere listens on another loopback port, a host a BMC may name, and counts the
// connections made to it.
func elsewhere(t testing.TB) (string, *atomic.Int32) {
	t.Helper()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	reached := new(atomic.Int32)
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()
	return other.Addr().String(), reached
}

// TestAnswerNotAnObjectRefused: a BMC that answers a part of the inventory with null, a
// list, a string or nothing leaves that part unread with the reason naming the resource;
// gofish dereferences a collection answered as null, which crashed the process driving
// the BMC. The system itself answered so fails the call with DRIVER_ERROR.
func TestAnswerNotAnObjectRefused(t *testing.T) {
	sim := newSim(t, redfishsim.Config{PowerState: "On"})
	d := open(t, config(t, sim))
	bodies := []string{"null", " \n[]", `"x"`, "", "7"}
	for part, path := range map[string]string{"cpus": "/redfish/v1/Systems/1/Processors", "memory": "/redfish/v1/Systems/1/Memory", "nics": "/redfish/v1/Systems/1/EthernetInterfaces", "storage": "/redfish/v1/Systems/1/Storage"} {
		for _, body := range bodies {
			sim.Answer(path, http.StatusOK, []byte(body))
			inv, err := d.Inspect(context.Background())
			sim.Answer(path, 0, nil)
			if err != nil || len(inv.Unread) != 1 || inv.Unread[0].Part != part || !strings.Contains(inv.Unread[0].Error, path+" answered") {
				t.Fatalf("%s answered %q: %v, unread %+v; want %s unread naming %s", path, body, err, inv.Unread, part, path)
			}
		}
	}
	for _, body := range bodies {
		sim.Answer("/redfish/v1/Systems/1", http.StatusOK, []byte(body))
		_, err := d.GetPower(context.Background())
		sim.Answer("/redfish/v1/Systems/1", 0, nil)
		if e := proto.AsError(err); e.Code != proto.DriverError || !strings.Contains(e.Message, "/redfish/v1/Systems/1 answered") {
			t.Fatalf("the system answered %q: %v (%s), want DRIVER_ERROR naming it", body, err, e.Code)
		}
	}
	if inv, err := d.Inspect(context.Background()); err != nil || len(inv.Unread) != 0 {
		t.Fatalf("the BMC answering well again: %v, unread %+v", err, inv.Unread)
	}
}
