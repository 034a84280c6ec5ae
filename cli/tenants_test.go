package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

func TestTenantsAndCredentialsAgainstARealRegistry(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	if st, err := os.Stat(admin); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("admin.conf: %v, mode %v; want 0600", err, st.Mode().Perm())
	}

	var tn struct{ ID string }
	testkit.JSON(t, admin, &tn, "tenants", "create", "acme")
	if tn.ID != "acme" {
		t.Fatalf("created %+v", tn)
	}
	if e := testkit.Fails(t, admin, "tenants", "create", "acme"); e.Code != "CONFLICT" || e.Details.Path != "name" {
		t.Errorf("duplicate tenant: %+v", e)
	}
	if e := testkit.Fails(t, admin, "tenants", "create", "Bad_Name"); e.Code != "INVALID_INPUT" || e.Details.Path != "name" {
		t.Errorf("bad name: %+v", e)
	}

	reader := filepath.Join(t.TempDir(), "reader.conf")
	var made struct {
		ID, Credential, Config string
		Actions                []string
	}
	testkit.JSON(t, admin, &made, "credentials", "create", "--tenant", "acme", "--actions", "compute:profiles:read", "--out", reader)
	if made.Credential != "" {
		t.Errorf("the secret was printed: %+v", made)
	}
	if st, err := os.Stat(reader); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credential config: %v", err)
	}
	if e := testkit.Fails(t, reader, "tenants", "list"); e.Code != "FORBIDDEN" {
		t.Errorf("reader listing tenants: %+v", e)
	}
	if e := testkit.Fails(t, reader, "credentials", "create", "--actions", "compute:profiles:manage", "--out", filepath.Join(t.TempDir(), "x")); e.Code != "FORBIDDEN" {
		t.Errorf("reader making a credential: %+v", e)
	}
	if e := testkit.Fails(t, admin, "credentials", "create", "--tenant", "acme", "--actions", "compute:nothing", "--out", filepath.Join(t.TempDir(), "x")); e.Code != "INVALID_INPUT" || e.Details.Path != "actions[0]" {
		t.Errorf("unknown action: %+v", e)
	}

	// A forged credential is UNAUTHENTICATED, in table form too: exit 1, code on stderr.
	cfg, _ := api.LoadClientConfig(reader)
	cfg.Credential = cfg.Credential[:len(cfg.Credential)-4] + "AAAA"
	forged := filepath.Join(t.TempDir(), "forged.conf")
	api.WriteClientConfig(forged, cfg)
	res := testkit.CLI(t, forged, "tenants", "list")
	if res.Code != 1 || !strings.Contains(res.Stderr, "UNAUTHENTICATED") {
		t.Errorf("forged credential: exit %d, stderr %q", res.Code, res.Stderr)
	}

	// Restart on the same data directory: nothing acknowledged is lost and admin.conf
	// still works.
	reg.Stop()
	reg = testkit.StartRegistry(t, reg.DataDir)
	var list struct{ Tenants []struct{ ID string } }
	testkit.JSON(t, admin, &list, "tenants", "list")
	if len(list.Tenants) != 2 || list.Tenants[0].ID != "acme" || list.Tenants[1].ID != "root" {
		t.Errorf("after restart: %+v", list)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown command": {"frobnicate"},
		"missing arg":     {"tenants", "create"},
		"bad format":      {"tenants", "list", "--format", "yaml"},
		"unknown flag":    {"tenants", "list", "--nope"},
	} {
		t.Run(name, func(t *testing.T) {
			if res := testkit.CLI(t, "/nonexistent", args...); res.Code != 2 {
				t.Errorf("exit %d, want 2; stderr %q", res.Code, res.Stderr)
			}
		})
	}
}

// TestCredentialGrantsOnlyWhatItHolds tries, as a tenant's credential manager, to make a
// credential with an action it lacks: refused at the path of that action, and nothing
// is made; what it holds it may grant.
func TestCredentialGrantsOnlyWhatItHolds(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	dir := t.TempDir()
	manager := filepath.Join(dir, "manager.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:credentials:manage,compute:profiles:read", "--out", manager)

	for name, tc := range map[string]struct{ actions, path string }{
		"an action it lacks":           {"compute:secrets:manage", "actions[0]"},
		"after one it holds":           {"compute:profiles:read,compute:secrets:manage", "actions[1]"},
		"the tenant-wide manage right": {"compute:tenants:manage", "actions[0]"},
	} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(dir, "refused.conf")
			e := testkit.Fails(t, manager, "credentials", "create", "--actions", tc.actions, "--out", out)
			if e.Code != "FORBIDDEN" || e.Details.Path != tc.path || !strings.Contains(e.Message, "does not hold") {
				t.Errorf("granting %s: %+v, want FORBIDDEN at %s", tc.actions, e, tc.path)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a config was written for a refused credential: %v", err)
			}
		})
	}

	granted := filepath.Join(dir, "granted.conf")
	var made struct {
		TenantID string
		Actions  []string
	}
	testkit.JSON(t, manager, &made, "credentials", "create", "--actions", "compute:profiles:read,compute:credentials:manage", "--out", granted)
	if made.TenantID != "acme" || strings.Join(made.Actions, ",") != "compute:profiles:read,compute:credentials:manage" {
		t.Errorf("granted what it holds: %+v", made)
	}
	testkit.JSON(t, granted, nil, "profiles", "list")
}
