package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/registry/workflow"
)

// TestEnrollRefusesAMalformedBindingAtItsPath: metal.enroll, over HTTP, refuses a driver
// binding override of the wrong shape (a number or an array for a binding, a key a binding
// does not have, a driver that is not a string) INVALID_INPUT at the path of the offending
// field in the body, and enrolls nothing; the same body with well-formed bindings enrolls.
func TestEnrollRefusesAMalformedBindingAtItsPath(t *testing.T) {
	st, srv, secret := enrollingServer(t)
	enroll := func(drivers string) string {
		return `{"pool":"gpu","macs":["52:54:00:00:0e:01"],"bmc":{"driver":"redfish","address":"https://10.0.0.5"},"drivers":` + drivers + `}`
	}

	for _, tc := range []struct{ drivers, path string }{
		{`{"power":5}`, "drivers.power"},
		{`{"power":["redfish"]}`, "drivers.power"},
		{`{"power":true}`, "drivers.power"},
		{`{"boot":"http-boot","power":{"driver":"redfish","timeout":30}}`, "drivers.power.timeout"},
		{`{"power":{"Driver":"redfish"}}`, "drivers.power.Driver"},
		{`{"power":{"driver":7}}`, "drivers.power.driver"},
		{`{"power":{"driver":["redfish"]}}`, "drivers.power.driver"},
	} {
		status, _, e := callAs(t, srv, secret, "metal.enroll", "application/json", enroll(tc.drivers))
		if status != http.StatusBadRequest || e.Code != proto.InvalidInput || e.Details.Path != tc.path {
			t.Errorf("drivers %s: %d %s at %q (%s), want INVALID_INPUT at %q", tc.drivers, status, e.Code, e.Details.Path, e.Message, tc.path)
		}
	}
	if n := nodes(t, st); n != 0 {
		t.Fatalf("%d node(s) stored after malformed enrollments, want none", n)
	}

	// The bindings well formed, as a driver's name and as {driver, config}: enrolled.
	if status, _, e := callAs(t, srv, secret, "metal.enroll", "application/json", enroll(`{"boot":"http-boot","power":{"driver":"redfish","config":{}}}`)); status != http.StatusOK {
		t.Fatalf("well-formed bindings: %d %s at %q: %s", status, e.Code, e.Details.Path, e.Message)
	}
	if n := nodes(t, st); n != 1 {
		t.Fatalf("%d node(s) stored after a well-formed enrollment, want 1", n)
	}
}

// enrollingServer is the API with metal over HTTP, on a filled store whose site takes
// BMCs of 10.0.0.0/24, and a credential of the usual tenant that enrolls machines.
func enrollingServer(t *testing.T) (*store.Store, *httptest.Server, string) {
	t.Helper()
	st := storetest.Filled(t, store.Options{})
	var secret string
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if _, err := tx.SetSiteBMCNetworks(storetest.Site, []string{"10.0.0.0/24"}); err != nil {
			return err
		}
		_, secret, err = tx.CreateCredential(storetest.Tenant, []string{ActionNodesManage}, time.Now().Add(time.Hour))
		return err
	})
	s := NewServer(st, slog.New(slog.DiscardHandler))
	s.RegisterMetal(metal.New(metal.Config{Store: st, Engine: workflow.New(workflow.Config{Store: st})}))
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return st, srv, secret
}

// nodes counts the nodes of the usual tenant in st.
func nodes(t *testing.T, st *store.Store) int {
	t.Helper()
	var count int
	if err := st.View(func(tx *store.Tx) error {
		ns, _, err := tx.Nodes(storetest.Tenant, "", "", store.Page{Limit: 100})
		count = len(ns)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return count
}
