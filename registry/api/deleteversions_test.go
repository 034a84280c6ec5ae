package api

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestDeleteEveryVersionOfAProfileOfThousands: on an etcd cluster of the defaults,
// profiles.delete without a version hides every version of a profile of thousands of
// them (one public), lowest first, store.MaxHidden a transaction, and answers them all;
// none is left to lookups, the public list or the latest. Before, every version went in
// one transaction, two writes each, which etcd refused past 2,046 versions: the delete
// was INTERNAL, hiding nothing. A profile of exactly twice MaxHidden versions ends at
// its second transaction's answer too.
func TestDeleteEveryVersionOfAProfileOfThousands(t *testing.T) {
	for _, versions := range []int{2 * store.MaxHidden, 2500} {
		t.Run(fmt.Sprint(versions), func(t *testing.T) {
			st := storetest.OpenEtcd(t, store.Options{})
			s := NewServer(st, slog.New(slog.DiscardHandler))
			s.RegisterAll()
			var secret string
			storetest.Update(t, st, func(tx *store.Tx) (err error) {
				if _, err = tx.CreateTenant(store.RootTenant); err != nil {
					return err
				}
				_, secret, err = tx.CreateCredential(store.RootTenant, []string{ActionProfilesManage, ActionProfilesRead}, time.Now().Add(time.Hour))
				return err
			})
			for v := 1; v <= versions; {
				storetest.Update(t, st, func(tx *store.Tx) error {
					for end := min(v+500, versions+1); v < end; v++ {
						vis := store.Private
						if v == 1500 {
							vis = store.Public
						}
						_, err := tx.CreateProfile(store.ProfileRecord{Tenant: store.RootTenant, ID: "gpu", Version: v, Visibility: vis,
							Document: fmt.Appendf(nil, `{"id":"gpu","version":%d}`, v)})
						if err != nil {
							return err
						}
					}
					return nil
				})
			}
			var out DeletedProfiles
			if err := NewHandlerClient(s, secret).Call(context.Background(), "profiles.delete", ProfileKey{ID: "gpu"}, &out); err != nil {
				t.Fatalf("deleting every version of a profile of %d: %v", versions, err)
			}
			if len(out.Versions) != versions || !slices.IsSorted(out.Versions) || out.Versions[0] != 1 || out.Versions[versions-1] != versions {
				t.Errorf("hid %d versions, %v to %v; want 1 to %d", len(out.Versions), out.Versions[:1], out.Versions[len(out.Versions)-1:], versions)
			}
			st.View(func(tx *store.Tx) error {
				if rec, ok, err := tx.LatestProfile(store.RootTenant, "gpu"); ok || err != nil {
					t.Errorf("the latest version of the deleted profile: %d (%v)", rec.Version, err)
				}
				if rec, ok, err := tx.PublicProfile(store.RootTenant, "gpu", 1500); ok || err != nil {
					t.Errorf("the public version is still public: %d (%v)", rec.Version, err)
				}
				return nil
			})
		})
	}
}
