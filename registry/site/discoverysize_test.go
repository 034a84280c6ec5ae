package site

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestAnotherTenantsMachinesDoNotStopASitesDiscoveries: on an etcd cluster of the
// defaults, a site's discoveries report naming acme's machine beside four of another
// tenant's, enrolled at the same site by their product UUIDs with the labels and driver
// configs enrollment allows (256 labels of the longest name and value, six configs
// under 64 KiB: about half a MiB a node), proposes and binds each machine's MAC. Before,
// the whole report went in one transaction, which every node it changed took whole:
// four such nodes were more than etcd takes in one request, and the report recorded
// nothing, for any tenant, at each of the site agent's reports.
func TestAnotherTenantsMachinesDoNotStopASitesDiscoveries(t *testing.T) {
	st := storetest.OpenEtcd(t, store.Options{})
	storetest.Fill(t, st)
	labels := map[string]string{}
	for i := range 256 {
		labels[fmt.Sprintf("l%03d", i)+strings.Repeat("n", 249)] = strings.Repeat("v", 253)
	}
	drivers := map[string]store.DriverBinding{}
	for _, c := range []string{"power", "management", "virtual-media", "boot", "deploy", "inspect"} {
		drivers[c] = store.DriverBinding{Driver: "redfish", Config: json.RawMessage(`{"pad":"` + strings.Repeat("c", 60<<10) + `"}`)}
	}
	uuid := func(i int) string { return fmt.Sprintf("%08x-9abc-def0-1122-334455667788", i) }
	var ids []string
	for i := range 5 {
		storetest.Update(t, st, func(tx *store.Tx) error {
			n := store.Node{Tenant: "acme", Pool: "trusted", ProductUUID: uuid(i)}
			if i > 0 {
				n = store.Node{Tenant: "beta", Pool: "big", ProductUUID: uuid(i), Labels: labels, Drivers: drivers}
			}
			if i < 2 {
				if _, err := tx.CreateTenant(n.Tenant); err != nil && proto.CodeOf(err) != proto.Conflict {
					return err
				}
				if _, err := tx.CreatePool(store.Pool{Tenant: n.Tenant, Name: n.Pool, Site: storetest.Site, Policy: store.PoolPolicy{TrustProvisioningNetwork: true}}); err != nil {
					return err
				}
			}
			n, err := tx.CreateNode(n)
			ids = append(ids, n.ID)
			return err
		})
	}
	s := New(Config{Store: st, Log: slog.New(slog.DiscardHandler)})
	seen := time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)
	var list []proto.Discovery
	for i := range 5 {
		list = append(list, proto.Discovery{MAC: fmt.Sprintf("52:54:00:00:00:%02x", i+1), ProductUUID: uuid(i), FirstSeen: seen, LastSeen: seen})
	}
	data, _ := json.Marshal(list)
	s.discoveries(report{Agent(storetest.Site), data})
	st.View(func(tx *store.Tx) error {
		for i, id := range ids {
			n, err := tx.Node(id)
			if want := list[i].MAC; err != nil || n.BoundMAC != want {
				t.Errorf("%s's node %s: bound %q (%v), want %s", n.Tenant, id, n.BoundMAC, err, want)
			}
		}
		return nil
	})
}
