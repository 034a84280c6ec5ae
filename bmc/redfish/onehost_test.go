package redfish

import (
	"context"
	"net"
	"net/http"
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
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var reached atomic.Int32
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
	at := other.Addr().String()
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
