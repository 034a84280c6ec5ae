package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestCredentialLifecycleAgainstARealRegistry lists, revokes and expires credentials
// through the binaries, as a tenant would try to reach another's and as a holder of a
// revoked or expired credential would try to go on.
func TestCredentialLifecycleAgainstARealRegistry(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	dir := t.TempDir()
	type cred struct {
		ID, TenantID         string
		Actions              []string
		CreatedAt, ExpiresAt time.Time
		RevokedAt            time.Time
		Config               string
	}
	create := func(config, name string, args ...string) cred {
		t.Helper()
		var c cred
		testkit.JSON(t, config, &c, append([]string{"credentials", "create", "--out", filepath.Join(dir, name+".conf")}, args...)...)
		return c
	}
	for _, tn := range []string{"acme", "beta"} {
		testkit.JSON(t, admin, nil, "tenants", "create", tn)
	}
	acmeMgr := create(admin, "acme-mgr", "--tenant", "acme", "--actions", "compute:credentials:manage,compute:profiles:read")
	acmeReader := create(admin, "acme-reader", "--tenant", "acme", "--actions", "compute:profiles:read")
	betaMgr := create(admin, "beta-mgr", "--tenant", "beta", "--actions", "compute:credentials:manage")
	betaReader := create(admin, "beta-reader", "--tenant", "beta", "--actions", "compute:profiles:read")
	rootMgr := create(admin, "root-mgr", "--actions", "compute:credentials:manage")
	ids := func(config string, args ...string) []string {
		t.Helper()
		res := testkit.CLI(t, config, append([]string{"credentials", "list", "--format", "json"}, args...)...)
		if res.Code != 0 {
			t.Fatalf("credentials list %v: exit %d: %s%s", args, res.Code, res.Stdout, res.Stderr)
		}
		for _, secret := range []string{"bcc_", "secretHash", `"credential"`} {
			if strings.Contains(res.Stdout, secret) {
				t.Errorf("credentials list shows %s:\n%s", secret, res.Stdout)
			}
		}
		var out struct{ Credentials []cred }
		json.Unmarshal([]byte(res.Stdout), &out)
		var got []string
		for _, c := range out.Credentials {
			got = append(got, c.ID)
		}
		slices.Sort(got)
		return got
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }

	t.Run("a tenant lists its own credentials only", func(t *testing.T) {
		if got, want := ids(acmeMgr.Config), sorted(acmeMgr.ID, acmeReader.ID); !slices.Equal(got, want) {
			t.Errorf("acme lists %v, want %v", got, want)
		}
		if e := testkit.Fails(t, acmeMgr.Config, "credentials", "list", "--tenant", "beta"); e.Code != "NOT_FOUND" {
			t.Errorf("acme listing beta's: %+v, want NOT_FOUND", e)
		}
		if got, want := ids(admin, "--tenant", "beta"), sorted(betaMgr.ID, betaReader.ID); !slices.Equal(got, want) {
			t.Errorf("the root tenant lists beta's %v, want %v", got, want)
		}
		if e := testkit.Fails(t, acmeReader.Config, "credentials", "list"); e.Code != "FORBIDDEN" {
			t.Errorf("a credential without compute:credentials:manage listing: %+v", e)
		}
	})

	t.Run("another tenant's credential is not found, and stays usable", func(t *testing.T) {
		e := testkit.Fails(t, acmeMgr.Config, "credentials", "revoke", betaReader.ID)
		if e.Code != "NOT_FOUND" || e.Details.Path != "id" || e.Message != fmt.Sprintf("credential %q not found", betaReader.ID) {
			t.Errorf("acme revoking beta's credential: %+v, want NOT_FOUND at id", e)
		}
		if e := testkit.Fails(t, acmeMgr.Config, "credentials", "revoke", "0123456789abcdef"); e.Message != `credential "0123456789abcdef" not found` {
			t.Errorf("an unknown id: %+v: must read as another tenant's does", e)
		}
		testkit.JSON(t, betaReader.Config, nil, "profiles", "list")
		// The root tenant's credential manager reaches every tenant's.
		var revoked cred
		testkit.JSON(t, rootMgr.Config, &revoked, "credentials", "revoke", betaMgr.ID)
		if revoked.TenantID != "beta" || revoked.RevokedAt.IsZero() {
			t.Errorf("root revoking beta's credential: %+v", revoked)
		}
	})

	t.Run("a revoked credential is refused at once", func(t *testing.T) {
		testkit.JSON(t, acmeReader.Config, nil, "profiles", "list")
		var revoked cred
		testkit.JSON(t, acmeMgr.Config, &revoked, "credentials", "revoke", acmeReader.ID)
		if revoked.ID != acmeReader.ID || revoked.RevokedAt.IsZero() {
			t.Errorf("revoke answered %+v", revoked)
		}
		if e := testkit.Fails(t, acmeReader.Config, "profiles", "list"); e.Code != "UNAUTHENTICATED" || !strings.Contains(e.Message, "revoked") {
			t.Errorf("the revoked credential: %+v, want UNAUTHENTICATED saying it was revoked", e)
		}
		// The list still shows it, with the time.
		res := testkit.CLI(t, acmeMgr.Config, "credentials", "list")
		if !strings.Contains(res.Stdout, acmeReader.ID) || !strings.Contains(res.Stdout, revoked.RevokedAt.UTC().Format(time.RFC3339)) {
			t.Errorf("credentials list after revoking:\n%s", res.Stdout)
		}
	})

	t.Run("no credential revokes itself or the last admin credential", func(t *testing.T) {
		if e := testkit.Fails(t, acmeMgr.Config, "credentials", "revoke", acmeMgr.ID); e.Code != "FORBIDDEN" || e.Details.Path != "id" {
			t.Errorf("revoking itself: %+v", e)
		}
		var adminID string
		for _, id := range ids(admin) {
			if id != rootMgr.ID {
				adminID = id
			}
		}
		e := testkit.Fails(t, rootMgr.Config, "credentials", "revoke", adminID)
		if e.Code != "FORBIDDEN" || e.Details.Path != "id" || !strings.Contains(e.Message, "last") {
			t.Errorf("revoking the admin credential: %+v", e)
		}
		testkit.JSON(t, admin, nil, "tenants", "list")
	})

	t.Run("nobody grants *", func(t *testing.T) {
		for _, tc := range []struct{ config, actions, path string }{
			{admin, "*", "actions[0]"},
			{admin, "compute:profiles:read,*", "actions[1]"},
			{acmeMgr.Config, "*", "actions[0]"},
		} {
			out := filepath.Join(dir, "star.conf")
			e := testkit.Fails(t, tc.config, "credentials", "create", "--actions", tc.actions, "--out", out)
			if e.Code != "INVALID_INPUT" || e.Details.Path != tc.path {
				t.Errorf("granting %s: %+v, want INVALID_INPUT at %s", tc.actions, e, tc.path)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a config was written for a refused credential")
			}
		}
	})

	t.Run("expiry", func(t *testing.T) {
		at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
		if c := create(admin, "until", "--tenant", "acme", "--actions", "compute:profiles:read", "--expires", at.Format(time.RFC3339)); !c.ExpiresAt.Equal(at) {
			t.Errorf("--expires %s: expires at %s", at.Format(time.RFC3339), c.ExpiresAt)
		}
		for expires, path := range map[string]string{"-5m": "--expires", "soon": "--expires", "2020-01-01T00:00:00Z": "expiresAt"} {
			if e := testkit.Fails(t, admin, "credentials", "create", "--actions", "compute:profiles:read", "--expires", expires, "--out", filepath.Join(dir, "x.conf")); e.Code != "INVALID_INPUT" || e.Details.Path != path {
				t.Errorf("--expires %s: %+v, want INVALID_INPUT at %s", expires, e, path)
			}
		}
		// A credential that expires makes none that outlives it.
		temp := create(admin, "temp", "--tenant", "acme", "--actions", "compute:credentials:manage,compute:profiles:read", "--expires", "1h")
		if child := create(temp.Config, "child", "--actions", "compute:profiles:read"); !child.ExpiresAt.Equal(temp.ExpiresAt) {
			t.Errorf("a credential made by one expiring at %s expires at %s", temp.ExpiresAt, child.ExpiresAt)
		}
		if e := testkit.Fails(t, temp.Config, "credentials", "create", "--actions", "compute:profiles:read", "--expires", "2h", "--out", filepath.Join(dir, "x.conf")); e.Code != "FORBIDDEN" || e.Details.Path != "expiresAt" {
			t.Errorf("outliving its maker: %+v", e)
		}

		short := create(admin, "short", "--tenant", "acme", "--actions", "compute:profiles:read", "--expires", "2s")
		time.Sleep(time.Until(short.ExpiresAt) + 100*time.Millisecond)
		if e := testkit.Fails(t, short.Config, "profiles", "list"); e.Code != "UNAUTHENTICATED" || !strings.Contains(e.Message, "expired") {
			t.Errorf("an expired credential: %+v, want UNAUTHENTICATED saying it expired", e)
		}
	})
}

// TestCredentialsCreateNeverOverwrites: --out naming an existing file (admin.conf, the
// only root credential) or a file in a missing directory is refused before anything is
// made: the file keeps its credential, and the tenant has no new one.
func TestCredentialsCreateNeverOverwrites(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	before, err := os.ReadFile(admin)
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		var out struct{ Credentials []struct{ ID string } }
		testkit.JSON(t, admin, &out, "credentials", "list")
		return len(out.Credentials)
	}
	n := count()
	for name, out := range map[string]string{
		"admin.conf itself":     admin,
		"a missing directory":   filepath.Join(t.TempDir(), "missing", "reader.conf"),
		"a directory, not file": t.TempDir(),
	} {
		e := testkit.Fails(t, admin, "credentials", "create", "--actions", "compute:profiles:read", "--out", out)
		if e.Code != "INVALID_INPUT" || e.Details.Path != "--out" || !strings.Contains(e.Message, "nothing was made") {
			t.Errorf("%s: %+v, want INVALID_INPUT at --out saying nothing was made", name, e)
		}
	}
	if after, _ := os.ReadFile(admin); string(after) != string(before) {
		t.Errorf("admin.conf changed")
	}
	if got := count(); got != n {
		t.Errorf("refused creates made credentials: %d, want %d", got, n)
	}
	testkit.JSON(t, admin, nil, "tenants", "list") // the admin credential still works
}

// TestCLIRefusesAConfigOthersCanRead: a CLI config (it holds a credential) that its group
// or others may read is refused before anything is sent, naming the file and the chmod
// that fixes it; made private again, it works.
func TestCLIRefusesAConfigOthersCanRead(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	if err := os.Chmod(reg.AdminConfig, 0o644); err != nil {
		t.Fatal(err)
	}
	e := testkit.Fails(t, reg.AdminConfig, "tenants", "list")
	if e.Code != "INVALID_CONFIG" || !strings.Contains(e.Message, reg.AdminConfig+" is mode 0644") || !strings.Contains(e.Message, "chmod 600 "+reg.AdminConfig) {
		t.Errorf("admin.conf 0644: %+v", e)
	}
	os.Chmod(reg.AdminConfig, 0o600)
	testkit.JSON(t, reg.AdminConfig, nil, "tenants", "list")
}
