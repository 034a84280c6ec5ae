package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/testkit"
)

// rotated is what `credentials rotate-admin --format json` prints.
type rotated struct {
	Admin   struct{ ID string }
	Config  string
	Revoked []struct{ ID string }
}

// rotateAdmin runs `credentials rotate-admin` against the registry whose data directory
// is dataDir, as its host does.
func rotateAdmin(t *testing.T, dataDir string) rotated {
	t.Helper()
	var out rotated
	testkit.JSON(t, "/nonexistent", &out, "credentials", "rotate-admin", "--data-dir", dataDir)
	if out.Admin.ID == "" || len(out.Revoked) == 0 {
		t.Fatalf("rotate-admin printed %+v", out)
	}
	return out
}

// refusedAsRevoked checks that config's credential is refused, as revoked.
func refusedAsRevoked(t *testing.T, what, config string) {
	t.Helper()
	if e := testkit.Fails(t, config, "tenants", "list"); e.Code != "UNAUTHENTICATED" || !strings.Contains(e.Message, "revoked") {
		t.Errorf("%s: %+v, want UNAUTHENTICATED saying it was revoked", what, e)
	}
}

// TestRotateAdminOnlyOnTheHost rotates the admin credential through the real binaries and
// tries it as everyone else would: over HTTPS with a root-tenant credential holding
// every grantable action, with the admin credential itself, and as a tenant; each is
// FORBIDDEN and changes nothing. After the host's rotation the leaked admin.conf is
// refused, the new one works, and a restart keeps it so, refreshing the new file's URL
// and never bringing the old credential back.
func TestRotateAdminOnlyOnTheHost(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	dir := t.TempDir()
	leaked := filepath.Join(dir, "leaked-admin.conf")
	testkit.CopyFile(t, admin, leaked)
	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	grantable := slices.DeleteFunc(slices.Clone(api.Actions), func(a string) bool { return a == api.ActionAll })
	rootAll := filepath.Join(dir, "root-all.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--actions", strings.Join(grantable, ","), "--out", rootAll)
	tenant := filepath.Join(dir, "acme.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:credentials:manage", "--out", tenant)
	list := func() string {
		t.Helper()
		res := testkit.CLI(t, rootAll, "credentials", "list", "--format", "json")
		if res.Code != 0 {
			t.Fatalf("credentials list: %s%s", res.Stdout, res.Stderr)
		}
		return res.Stdout
	}
	before, beforeList := contents(t, admin), list()

	t.Run("nobody rotates over the network", func(t *testing.T) {
		for name, config := range map[string]string{
			"root with every grantable action": rootAll,
			"the admin credential itself":      admin,
			"a tenant's credential manager":    tenant,
		} {
			var out api.RotatedAdmin
			err := testkit.Client(t, config).Call(context.Background(), "credentials.rotateAdmin", struct{}{}, &out)
			if err == nil {
				t.Errorf("%s rotated the admin credential over HTTPS: %+v", name, out)
			} else if e := proto.AsError(err); e.Code != proto.Forbidden || !strings.Contains(e.Message, "admin socket") {
				t.Errorf("%s over HTTPS: %v, want FORBIDDEN: host only", name, err)
			}
		}
		if e := testkit.UsageFails(t, rootAll, "credentials", "rotate-admin"); e.Details.Path != "--data-dir" {
			t.Errorf("rotate-admin without --data-dir: %+v", e)
		}
		if e := testkit.Fails(t, rootAll, "credentials", "rotate-admin", "--data-dir", t.TempDir()); e.Code != "UNAVAILABLE" || !strings.Contains(e.Message, "admin socket") {
			t.Errorf("rotate-admin with a directory no registry serves: %+v", e)
		}
		if contents(t, admin) != before || list() != beforeList {
			t.Errorf("a refused rotation changed admin.conf or the credentials")
		}
		testkit.JSON(t, leaked, nil, "tenants", "list")
	})

	var got rotated
	t.Run("the host rotates", func(t *testing.T) {
		got = rotateAdmin(t, reg.DataDir)
		if got.Config != admin {
			t.Errorf("written to %s, want %s", got.Config, admin)
		}
		refusedAsRevoked(t, "the leaked admin.conf", leaked)
		if id := whoami(t, admin); id != got.Admin.ID {
			t.Errorf("admin.conf holds %s, want the new %s", id, got.Admin.ID)
		}
		if st, err := os.Stat(admin); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("admin.conf: %v, mode %v", err, st.Mode().Perm())
		}
		// Only `*` credentials are replaced: the others keep working.
		testkit.JSON(t, rootAll, nil, "tenants", "list")
		testkit.JSON(t, tenant, nil, "credentials", "list")
	})

	t.Run("a restart keeps the new one and the old one revoked", func(t *testing.T) {
		oldURL := reg.URL
		reg.Stop()
		reg = testkit.StartRegistry(t, reg.DataDir)
		cfg, err := api.LoadClientConfig(admin)
		if err != nil || cfg.Server != reg.URL || reg.URL == oldURL {
			t.Errorf("admin.conf after a restart on another port: %+v %v, want server %s", cfg, err, reg.URL)
		}
		if id := whoami(t, admin); id != got.Admin.ID {
			t.Errorf("admin.conf after the restart holds %s, want %s", id, got.Admin.ID)
		}
		// The leaked file, pointed at the restarted registry, is still refused.
		cfg, _ = api.LoadClientConfig(leaked)
		cfg.Server = reg.URL
		api.WriteClientConfig(leaked, cfg)
		refusedAsRevoked(t, "the leaked admin.conf after the restart", leaked)
	})

	t.Run("a data directory given back the old file is told, and rotates again", func(t *testing.T) {
		testkit.CopyFile(t, leaked, admin)
		reg.Stop()
		reg = testkit.StartRegistry(t, reg.DataDir)
		refusedAsRevoked(t, "the old admin.conf put back", admin)
		again := rotateAdmin(t, reg.DataDir)
		testkit.JSON(t, admin, nil, "tenants", "list")
		if len(again.Revoked) != 1 || again.Revoked[0].ID != got.Admin.ID {
			t.Errorf("the second rotation revoked %+v, want %s", again.Revoked, got.Admin.ID)
		}
		reg.Stop()
		if log := reg.Stderr.String(); !strings.Contains(log, "the admin config holds a refused credential") || !strings.Contains(log, "rotate-admin --data-dir "+reg.DataDir) {
			t.Errorf("the start on a refused admin.conf did not say what to do:\n%s", log)
		}
	})
}

// TestRotateAdminWithReplicas rotates through one of two registries on one etcd store:
// the other's copy of the old admin.conf is refused there too, a restart of that replica
// neither makes a new admin credential nor brings the old one back (it says to copy the
// new file), and the copied new admin.conf works there once the replica rewrote its URL.
func TestRotateAdminWithReplicas(t *testing.T) {
	cluster := etcdtest.Start(t)
	kek := filepath.Join(t.TempDir(), "kek")
	args := []string{"--store", "etcd", "--etcd-endpoints", strings.Join(cluster.Endpoints, ","), "--kek-file", kek}
	first := testkit.StartRegistry(t, "", args...)
	secondDir := t.TempDir()
	testkit.CopyFile(t, first.AdminConfig, filepath.Join(secondDir, "admin.conf"))
	second := testkit.StartRegistry(t, secondDir, args...)
	testkit.JSON(t, second.AdminConfig, nil, "tenants", "list")

	got := rotateAdmin(t, first.DataDir)
	testkit.JSON(t, first.AdminConfig, nil, "tenants", "list")
	refusedAsRevoked(t, "the second replica's old admin.conf", second.AdminConfig)

	second.Stop()
	second = testkit.StartRegistry(t, secondDir, args...)
	refusedAsRevoked(t, "the old admin.conf after the replica's restart", second.AdminConfig)
	second.Stop()
	if log := second.Stderr.String(); !strings.Contains(log, "the admin config holds a refused credential") || !strings.Contains(log, "copy that registry's admin.conf here") {
		t.Errorf("the replica's start on the old admin.conf did not say to copy the new one:\n%s", log)
	}
	var admins struct {
		Credentials []struct {
			ID        string
			Actions   []string
			RevokedAt string
		}
	}
	testkit.JSON(t, first.AdminConfig, &admins, "credentials", "list")
	usable := 0
	for _, c := range admins.Credentials {
		if slices.Contains(c.Actions, "*") && c.RevokedAt == "" {
			usable++
			if c.ID != got.Admin.ID {
				t.Errorf("a replica's start left admin credential %s usable", c.ID)
			}
		}
	}
	if usable != 1 {
		t.Errorf("%d usable admin credentials after the replica's restart, want 1: %+v", usable, admins)
	}

	// The operator copies the new admin.conf; the replica's next start points it at itself.
	testkit.CopyFile(t, first.AdminConfig, filepath.Join(secondDir, "admin.conf"))
	second = testkit.StartRegistry(t, secondDir, args...)
	id := whoami(t, second.AdminConfig)
	if cfg, _ := api.LoadClientConfig(second.AdminConfig); id != got.Admin.ID || cfg.Server != second.URL {
		t.Errorf("the copied admin.conf at the second replica: %s at %s, want %s at %s", id, cfg.Server, got.Admin.ID, second.URL)
	}
}

// whoami is the id of the credential config holds, as the registry reads it.
func whoami(t *testing.T, config string) string {
	t.Helper()
	var who api.Credential
	if err := testkit.Client(t, config).Call(context.Background(), "credentials.whoami", struct{}{}, &who); err != nil {
		t.Fatalf("credentials.whoami with %s: %v", config, err)
	}
	return who.ID
}

func contents(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
