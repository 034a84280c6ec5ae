package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

func TestTokensAgainstARealRegistry(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a")

	var printed struct {
		ID, Kind, NodeID, Site, Token string
		ExpiresAt                     time.Time
	}
	testkit.JSON(t, admin, &printed, "tokens", "create", "--kind", "site", "--site", "rack-a", "--ttl", "48h")
	if printed.Kind != "site" || printed.NodeID != "rack-a" || !strings.HasPrefix(printed.Token, "bcj_") {
		t.Errorf("created %+v", printed)
	}
	if left := time.Until(printed.ExpiresAt); left < 47*time.Hour || left > 49*time.Hour {
		t.Errorf("a 48h token expires in %s", left)
	}

	// A bare number is seconds, as the help says.
	var bare struct{ CreatedAt, ExpiresAt time.Time }
	testkit.JSON(t, admin, &bare, "tokens", "create", "--kind", "ramdisk", "--node-id", "n1", "--ttl", "5")
	if life := bare.ExpiresAt.Sub(bare.CreatedAt); life != 5*time.Second {
		t.Errorf("--ttl 5 made a token living %s, want 5s", life)
	}

	out := filepath.Join(t.TempDir(), "token")
	var written struct{ ID, Token, Out string }
	testkit.JSON(t, admin, &written, "tokens", "create", "--kind", "provisioned", "--node-id", "node-1", "--out", out)
	if written.Token != "" || written.Out != out {
		t.Errorf("with --out the secret was printed: %+v", written)
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v", err)
	}
	if data, _ := os.ReadFile(out); !strings.HasPrefix(string(data), "bcj_"+written.ID+".") {
		t.Errorf("token file holds %q", data)
	}

	res := testkit.CLI(t, admin, "tokens", "list")
	if res.Code != 0 || !strings.Contains(res.Stdout, printed.ID) || !strings.Contains(res.Stdout, written.ID) || strings.Contains(res.Stdout, "bcj_") {
		t.Errorf("tokens list: exit %d\n%s", res.Code, res.Stdout)
	}

	for name, tc := range map[string]struct {
		args []string
		code string
		path string
		exit int // 1: the registry refuses the call; 2: the command line is wrong, nothing is called
	}{
		"no kind":                 {[]string{"--node-id", "n1"}, "INVALID_INPUT", "--kind", 2},
		"unknown kind":            {[]string{"--kind", "root", "--node-id", "n1"}, "INVALID_INPUT", "--kind", 2},
		"site without site":       {[]string{"--kind", "site"}, "INVALID_INPUT", "--site", 2},
		"node without node":       {[]string{"--kind", "provisioned"}, "INVALID_INPUT", "--node-id", 2},
		"ttl too long":            {[]string{"--kind", "ramdisk", "--node-id", "n1", "--ttl", "800h"}, "INVALID_INPUT", "ttlSeconds", 1},
		"ttl fraction":            {[]string{"--kind", "ramdisk", "--node-id", "n1", "--ttl", "1500ms"}, "INVALID_INPUT", "--ttl", 2},
		"ttl zero":                {[]string{"--kind", "ramdisk", "--node-id", "n1", "--ttl", "0"}, "INVALID_INPUT", "--ttl", 2},
		"unknown site":            {[]string{"--kind", "site", "--site", "rack-z"}, "NOT_FOUND", "site", 1},
		"ramdisk at unknown site": {[]string{"--kind", "ramdisk", "--node-id", "n1", "--site", "rack-z"}, "NOT_FOUND", "site", 1},
	} {
		t.Run(name, func(t *testing.T) {
			e := testkit.FailsExit(t, tc.exit, admin, append([]string{"tokens", "create"}, tc.args...)...)
			if e.Code != tc.code || e.Details.Path != tc.path {
				t.Errorf("got %+v, want %s at %s", e, tc.code, tc.path)
			}
		})
	}

	if res := testkit.CLI(t, admin, "tokens", "list"); strings.Count(res.Stdout, "\n") != 4 || strings.Contains(res.Stdout, "rack-z") {
		t.Errorf("tokens after the refusals, want the three minted only:\n%s", res.Stdout)
	}

	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	acme := filepath.Join(t.TempDir(), "acme.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:tokens:manage", "--out", acme)
	if e := testkit.Fails(t, acme, "tokens", "create", "--kind", "site", "--site", "rack-a"); e.Code != "FORBIDDEN" {
		t.Errorf("another tenant minting a token: %+v", e)
	}
	reader := filepath.Join(t.TempDir(), "reader.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--actions", "compute:profiles:read", "--out", reader)
	if e := testkit.Fails(t, reader, "tokens", "list"); e.Code != "FORBIDDEN" {
		t.Errorf("a credential without compute:tokens:manage listing tokens: %+v", e)
	}
}

// TestRegistryPrunesExpiredTokens: a registry that starts deletes the join tokens that
// expired more than the retention (30 days) ago, and keeps the others.
func TestRegistryPrunesExpiredTokens(t *testing.T) {
	dir := t.TempDir()
	reg := testkit.StartRegistry(t, dir)
	testkit.JSON(t, reg.AdminConfig, nil, "sites", "create", "rack-a")
	var fresh struct{ ID string }
	testkit.JSON(t, reg.AdminConfig, &fresh, "tokens", "create", "--kind", "site", "--site", "rack-a")
	reg.Stop()

	// A token minted 32 days ago that lived an hour, written while the registry is down.
	then := time.Now().Add(-32 * 24 * time.Hour)
	st, err := store.Open(dir, store.Options{Now: func() time.Time { return then }})
	if err != nil {
		t.Fatal(err)
	}
	var old store.JoinToken
	err = st.Update(func(tx *store.Tx) (err error) {
		old, _, err = tx.CreateJoinToken(store.TokenFor{Kind: store.TokenRamdisk, NodeID: "node-1", Site: "rack-a"}, then.Add(time.Hour))
		return err
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}

	reg = testkit.StartRegistry(t, dir)
	var list struct{ Tokens []struct{ ID string } }
	testkit.JSON(t, reg.AdminConfig, &list, "tokens", "list")
	if len(list.Tokens) != 1 || list.Tokens[0].ID != fresh.ID {
		t.Errorf("tokens after a restart: %+v; want only %s (%s pruned)", list.Tokens, fresh.ID, old.ID)
	}
}
