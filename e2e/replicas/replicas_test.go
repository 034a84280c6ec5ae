package replicas

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// TestReplicasShareOneRegistry: three replicas on one etcd cluster are one registry: the
// same pins (the keys sealed in the store, opened with copies of one key-encryption
// key), what one writes the others answer at once, and a single-use join token raced
// through the three (one `bcd join` at each, at once) admits exactly one agent, round
// after round.
func TestReplicasShareOneRegistry(t *testing.T) {
	f := startFleet(t)
	for i, r := range f.reg[1:] {
		if r.Pins != f.reg[0].Pins {
			t.Errorf("replica %d pins %+v, want the first one's %+v", i+2, r.Pins, f.reg[0].Pins)
		}
	}
	testkit.JSON(t, f.reg[0].AdminConfig, nil, "tenants", "create", "acme")
	for i, r := range f.reg {
		if names := tenants(t, r); !slices.Contains(names, "acme") {
			t.Errorf("replica %d lists tenants %v, without the one replica 1 made", i+1, names)
		}
	}

	for round := range 3 {
		site := fmt.Sprintf("rack-%d", round)
		testkit.JSON(t, f.reg[round].AdminConfig, nil, "sites", "create", site)
		tokenFile := filepath.Join(t.TempDir(), "token")
		testkit.JSON(t, f.reg[(round+1)%3].AdminConfig, nil, "tokens", "create", "--kind", "site", "--site", site, "--out", tokenFile)
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			admitted []int
			refused  []string
		)
		for i, r := range f.reg {
			wg.Go(func() {
				res := testkit.BCD(t, "join", "--server", r.URL, "--token-file", tokenFile, "--node-id", site, "--role", "site",
					"--config-dir", t.TempDir(), "--serving-ca-pin", r.Pins.ServingCA, "--join-signing-pin", r.Pins.JoinSigning,
					"--join-encryption-pin", r.Pins.JoinEncryption)
				mu.Lock()
				defer mu.Unlock()
				if res.Code == 0 {
					admitted = append(admitted, i+1)
				} else {
					refused = append(refused, res.Stderr)
				}
			})
		}
		wg.Wait()
		if len(admitted) != 1 {
			t.Errorf("round %d: the token admitted joins at replicas %v, want exactly one; refusals: %q", round, admitted, refused)
		}
	}
}

// tenants lists every tenant r answers with, page by page.
func tenants(t *testing.T, r *testkit.Registry) []string {
	t.Helper()
	c := testkit.Client(t, r.AdminConfig)
	var names []string
	req := api.ListRequest{Limit: 200}
	for {
		var page api.TenantList
		if err := c.Call(context.Background(), "tenants.list", req, &page); err != nil {
			t.Fatalf("tenants.list at %s: %v", r.URL, err)
		}
		for _, tn := range page.Tenants {
			names = append(names, tn.ID)
		}
		if page.NextCursor == "" {
			return names
		}
		req.Cursor = page.NextCursor
	}
}
