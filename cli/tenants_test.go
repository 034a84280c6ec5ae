package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
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
	testkit.StartRegistry(t, reg.DataDir)
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
		if e.Code != "NOT_FOUND" || e.Details.Path != "id" || e.Message != fmt.Sprintf("credential %q not found: `credentials list` shows the tenant's credentials", betaReader.ID) {
			t.Errorf("acme revoking beta's credential: %+v, want NOT_FOUND at id", e)
		}
		if e := testkit.Fails(t, acmeMgr.Config, "credentials", "revoke", "0123456789abcdef"); e.Message != "credential \"0123456789abcdef\" not found: `credentials list` shows the tenant's credentials" {
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

// TestNoMethodReachesAnotherTenant: tenant beta, holding every action a tenant can be
// given, calls the API methods as an attacker would, naming tenant acme's objects: acme
// as tenantId, acme's node, workflow, pool, profile, image, secret and credential by id
// or name (bare and as acme/NAME), a cursor made from acme's node's events, and the
// follows (events with afterSeq and wait, a workflow with afterRev). Each NOT_FOUND reads
// exactly as the answer for a name nobody has; the platform's methods are FORBIDDEN
// though beta holds their actions; and everything of acme's, and of the platform's, reads
// back unchanged. The lifecycle methods, metal.confirmMac, metal.get and the others
// TestNotFoundSaysWhoseForRootOnly and TestLifecycleRequestsStayInTheTenant name by id
// appear here by tenantId.
func TestNoMethodReachesAnotherTenant(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	configs := acmeAndBeta(t, admin, strings.Join(api.Actions, ","))
	ctx := context.Background()
	acme, beta, root := testkit.Client(t, configs["acme"]), testkit.Client(t, configs["beta"]), testkit.Client(t, admin)
	must := func(c *api.Client, method string, req, resp any) {
		t.Helper()
		if err := c.Call(ctx, method, req, resp); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
	}

	// Acme's objects: a ready node with its enrollment's workflow and events, a pool only
	// acme has, a private profile with user data, an image, a secret, a credential.
	bmc := api.BMC{Driver: "redfish", Address: "https://127.0.0.2"}
	var node, betaNode api.Node
	must(acme, "metal.enroll", api.EnrollRequest{Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}, BMC: bmc}, &node)
	must(beta, "metal.enroll", api.EnrollRequest{Pool: "gpu", MACs: []string{"52:54:00:00:00:02"}, BMC: api.BMC{Driver: "redfish", Address: "https://127.0.0.3"}}, &betaNode)
	answeringSite(t, reg, "rack-a")
	waitState(t, configs["acme"], node.ID, store.NodeReady)
	waitState(t, configs["beta"], betaNode.ID, store.NodeReady)
	must(acme, "pools.create", api.CreatePoolRequest{Name: "train", SiteID: "rack-a"}, nil)
	must(acme, "profiles.create", api.CreateProfileRequest{Document: api.Document(flatcarHost("acme-host"))}, nil)
	var img api.Image
	must(acme, "images.register", api.RegisterImageRequest{Ref: "acme-os@1", Format: "raw", SHA256: strings.Repeat("ab", 32), SizeBytes: new(int64(1)),
		Source: "https://images.example.com/acme-os.raw"}, &img)
	must(acme, "secrets.put", api.PutSecretRequest{Ref: "secret://k8s/acme-join", Value: []byte("abcdef.0123456789abcdef")}, nil)
	var acmeCred api.Credential
	must(acme, "credentials.whoami", struct{}{}, &acmeCred)
	var token api.CreatedToken
	must(root, "tokens.create", api.CreateTokenRequest{Kind: "provisioned", NodeID: node.ID, Site: "rack-a"}, &token)

	// What acme and the platform read before, and must read after.
	readBack := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		read := func(c *api.Client, method string, req any, resp any, keep func() any) {
			must(c, method, req, resp)
			b, _ := json.Marshal(keep())
			out[method] = string(b)
		}
		var n api.NodeView
		read(acme, "metal.get", api.NodeKey{NodeID: node.ID}, &n, func() any { return n.Node })
		var events api.EventList
		read(acme, "metal.events", api.EventsRequest{NodeID: node.ID}, &events, func() any { return events })
		var wf api.WorkflowView
		read(acme, "workflows.get", api.GetWorkflowRequest{ID: node.Workflow}, &wf, func() any { return wf })
		var pools api.PoolList
		read(acme, "pools.list", api.ListPoolsRequest{}, &pools, func() any { return pools })
		var profiles api.ProfileList
		read(acme, "profiles.list", api.ListProfilesRequest{}, &profiles, func() any { return profiles })
		var images api.ImageList
		read(acme, "images.list", api.ListImagesRequest{}, &images, func() any { return images })
		var secrets api.SecretList
		read(acme, "secrets.list", api.ListSecretsRequest{}, &secrets, func() any { return secrets })
		var creds api.CredentialList
		read(acme, "credentials.list", api.ListCredentialsRequest{}, &creds, func() any { return creds })
		var att api.NodeAttestation
		read(acme, "metal.attestation", api.NodeKey{NodeID: node.ID}, &att, func() any { return att })
		var tenants api.TenantList
		read(root, "tenants.list", api.ListRequest{}, &tenants, func() any { return tenants })
		var sites api.SiteList
		read(root, "sites.list", api.ListRequest{}, &sites, func() any {
			for i := range sites.Sites {
				sites.Sites[i].Agent = nil // whether rack-a's agent is connected, and when it was last seen
			}
			return sites
		})
		var tokens api.TokenList
		read(root, "tokens.list", api.ListRequest{}, &tokens, func() any { return tokens })
		return out
	}
	before := readBack()

	const nobodysNode, nobodysWorkflow = "nd_0123456789abcdef", "wf_0123456789abcdef"
	tenantScoped := map[string]func(tenant string) any{
		"metal.enroll": func(tn string) any {
			return api.EnrollRequest{TenantID: tn, Pool: "gpu", MACs: []string{"52:54:00:00:00:09"}, BMC: bmc}
		},
		"metal.list":        func(tn string) any { return api.ListNodesRequest{TenantID: tn} },
		"metal.get":         func(tn string) any { return api.NodeKey{TenantID: tn, NodeID: node.ID} },
		"metal.inventory":   func(tn string) any { return api.NodeKey{TenantID: tn, NodeID: node.ID} },
		"metal.attestation": func(tn string) any { return api.NodeKey{TenantID: tn, NodeID: node.ID} },
		"metal.acceptBoot": func(tn string) any {
			return api.AcceptBootRequest{TenantID: tn, NodeID: node.ID, Boot: "sha256:" + strings.Repeat("0", 64)}
		},
		"metal.events": func(tn string) any {
			return api.EventsRequest{TenantID: tn, NodeID: node.ID, AfterSeq: 1, Wait: true}
		},
		"metal.updateBmc": func(tn string) any {
			return api.UpdateBMCRequest{TenantID: tn, NodeID: node.ID, Address: "https://127.0.0.2"}
		},
		"metal.confirmMac": func(tn string) any {
			return api.ConfirmMACRequest{TenantID: tn, NodeID: node.ID, MAC: "52:54:00:00:00:01"}
		},
		"metal.deploy": func(tn string) any {
			return api.DeployRequest{TenantID: tn, NodeID: node.ID, ProfileID: "metal-inspect"}
		},
		"metal.remediate": func(tn string) any {
			return api.RemediateRequest{TenantID: tn, NodeID: node.ID, Profile: "remediate-reboot"}
		},
		"metal.revokeCertificates": func(tn string) any {
			return api.RevokeNodeCertificatesRequest{TenantID: tn, NodeID: node.ID}
		},
		"workflows.get": func(tn string) any { return api.GetWorkflowRequest{TenantID: tn, ID: node.Workflow, AfterRev: 1} },
		"pools.create":  func(tn string) any { return api.CreatePoolRequest{TenantID: tn, Name: "planted", SiteID: "rack-a"} },
		"pools.get":     func(tn string) any { return api.PoolRequest{TenantID: tn, Name: "train"} },
		"pools.update": func(tn string) any {
			return api.UpdatePoolRequest{TenantID: tn, Name: "train", PrewarmImages: &[]string{"acme-os@1"}}
		},
		"pools.list": func(tn string) any { return api.ListPoolsRequest{TenantID: tn} },
		"profiles.create": func(tn string) any {
			return api.CreateProfileRequest{TenantID: tn, Document: api.Document(eraser("planted", 1))}
		},
		"profiles.get":  func(tn string) any { return api.ProfileKey{TenantID: tn, ID: "acme-host"} },
		"profiles.list": func(tn string) any { return api.ListProfilesRequest{TenantID: tn} },
		"profiles.validate": func(tn string) any {
			return api.ValidateProfileRequest{ProfileKey: api.ProfileKey{TenantID: tn, ID: "acme-host"}}
		},
		"profiles.render": func(tn string) any { return api.ProfileKey{TenantID: tn, ID: "acme-host"} },
		"profiles.update": func(tn string) any {
			return api.UpdateProfileRequest{ProfileKey: api.ProfileKey{TenantID: tn, ID: "acme-host"}, Visibility: store.Public}
		},
		"profiles.delete": func(tn string) any { return api.ProfileKey{TenantID: tn, ID: "acme-host"} },
		"userdata.preview": func(tn string) any {
			return api.PreviewUserDataRequest{ProfileKey: api.ProfileKey{TenantID: tn, ID: "acme-host"}, NodeID: node.ID}
		},
		"images.register": func(tn string) any {
			return api.RegisterImageRequest{TenantID: tn, Ref: "planted@1", Format: "raw", SHA256: strings.Repeat("cd", 32), SizeBytes: new(int64(1)),
				Source: "https://images.example.com/planted.raw"}
		},
		"images.get":     func(tn string) any { return api.GetImageRequest{TenantID: tn, ID: img.ID} },
		"images.list":    func(tn string) any { return api.ListImagesRequest{TenantID: tn} },
		"images.promote": func(tn string) any { return api.ImageRequest{TenantID: tn, ID: img.ID} },
		"secrets.put": func(tn string) any {
			return api.PutSecretRequest{TenantID: tn, Ref: "secret://k8s/acme-join", Value: []byte("planted")}
		},
		"secrets.list":     func(tn string) any { return api.ListSecretsRequest{TenantID: tn} },
		"secrets.delete":   func(tn string) any { return api.SecretRequest{TenantID: tn, Ref: "secret://k8s/acme-join"} },
		"credentials.list": func(tn string) any { return api.ListCredentialsRequest{TenantID: tn} },
		"credentials.create": func(tn string) any {
			return api.CreateCredentialRequest{TenantID: tn, Actions: []string{api.ActionNodesManage}}
		},
	}
	for _, method := range []string{"metal.inspect", "metal.commission", "metal.release", "metal.retire", "metal.rescue", "metal.unrescue", "metal.retry", "metal.cancel"} {
		tenantScoped[method] = func(tn string) any { return api.TransitionRequest{TenantID: tn, NodeID: node.ID} }
	}
	var probes []probe
	for method, req := range tenantScoped {
		probes = append(probes, probe{method + " as tenant acme", req("acme"), req("nobody"), "acme", "nobody"})
	}
	doc := func(id string) api.Document { return api.Document(flatcarHost(id)) }
	probes = append(probes, []probe{
		{"metal.enroll into acme's pool", api.EnrollRequest{Pool: "train", MACs: []string{"52:54:00:00:00:09"}, BMC: bmc},
			api.EnrollRequest{Pool: "walk", MACs: []string{"52:54:00:00:00:09"}, BMC: bmc}, "train", "walk"},
		{"metal.updateBmc of acme's node", api.UpdateBMCRequest{NodeID: node.ID, Address: "https://127.0.0.2"},
			api.UpdateBMCRequest{NodeID: nobodysNode, Address: "https://127.0.0.2"}, node.ID, nobodysNode},
		{"metal.events following acme's node", api.EventsRequest{NodeID: node.ID, AfterSeq: 1, Wait: true},
			api.EventsRequest{NodeID: nobodysNode, AfterSeq: 1, Wait: true}, node.ID, nobodysNode},
		{"metal.events with a cursor into acme's node's events",
			api.EventsRequest{NodeID: betaNode.ID, ListRequest: api.ListRequest{Cursor: store.EventCursor(node.ID, 1)}},
			api.EventsRequest{NodeID: betaNode.ID, ListRequest: api.ListRequest{Cursor: store.EventCursor(nobodysNode, 1)}},
			store.EventCursor(node.ID, 1), store.EventCursor(nobodysNode, 1)},
		{"metal.events following acme's workflow on beta's node", api.EventsRequest{NodeID: betaNode.ID, WorkflowID: node.Workflow, AfterSeq: 1, Wait: true},
			api.EventsRequest{NodeID: betaNode.ID, WorkflowID: nobodysWorkflow, AfterSeq: 1, Wait: true}, node.Workflow, nobodysWorkflow},
		{"workflows.get following acme's workflow", api.GetWorkflowRequest{ID: node.Workflow, AfterRev: 1},
			api.GetWorkflowRequest{ID: nobodysWorkflow, AfterRev: 1}, node.Workflow, nobodysWorkflow},
		{"profiles.validate of acme's private profile", api.ValidateProfileRequest{ProfileKey: api.ProfileKey{ID: "acme/acme-host"}},
			api.ValidateProfileRequest{ProfileKey: api.ProfileKey{ID: "acme/nobodys-host"}}, "acme-host", "nobodys-host"},
		{"profiles.validate of acme's profile's bare name", api.ValidateProfileRequest{ProfileKey: api.ProfileKey{ID: "acme-host"}},
			api.ValidateProfileRequest{ProfileKey: api.ProfileKey{ID: "nobodys-host"}}, "acme-host", "nobodys-host"},
		{"profiles.update making acme's profile public", api.UpdateProfileRequest{ProfileKey: api.ProfileKey{ID: "acme/acme-host"}, Visibility: store.Public},
			api.UpdateProfileRequest{ProfileKey: api.ProfileKey{ID: "acme/nobodys-host"}, Visibility: store.Public}, "acme-host", "nobodys-host"},
		{"profiles.update of acme's profile's bare name", api.UpdateProfileRequest{ProfileKey: api.ProfileKey{ID: "acme-host"}, Visibility: store.Public},
			api.UpdateProfileRequest{ProfileKey: api.ProfileKey{ID: "nobodys-host"}, Visibility: store.Public}, "acme-host", "nobodys-host"},
		{"profiles.update replacing acme's document", api.UpdateProfileRequest{Document: doc("acme-host")},
			api.UpdateProfileRequest{Document: doc("nobodys-host")}, "acme-host", "nobodys-host"},
		{"profiles.delete of acme's profile", api.ProfileKey{ID: "acme/acme-host"}, api.ProfileKey{ID: "acme/nobodys-host"}, "acme-host", "nobodys-host"},
		{"userdata.preview of acme's profile", api.PreviewUserDataRequest{ProfileKey: api.ProfileKey{ID: "acme/acme-host"}, NodeID: betaNode.ID},
			api.PreviewUserDataRequest{ProfileKey: api.ProfileKey{ID: "acme/nobodys-host"}, NodeID: betaNode.ID}, "acme-host", "nobodys-host"},
		{"images.get of acme's image by ref", api.GetImageRequest{Ref: "acme/acme-os@1"}, api.GetImageRequest{Ref: "acme/nobodys-os@1"}, "acme-os", "nobodys-os"},
		{"secrets.delete of acme's secret's name", api.SecretRequest{Ref: "secret://k8s/acme-join"}, api.SecretRequest{Ref: "secret://k8s/nobodys-join"}, "acme-join", "nobodys-join"},
		{"credentials.revoke of acme's credential", api.RevokeCredentialRequest{ID: acmeCred.ID}, api.RevokeCredentialRequest{ID: "0123456789abcdef"}, acmeCred.ID, "0123456789abcdef"},
	}...)
	for _, p := range probes {
		p.run(t, beta)
	}

	// Beta's own lists show nothing of acme's.
	for method, req := range map[string]any{
		"metal.list": api.ListNodesRequest{}, "pools.list": api.ListPoolsRequest{}, "profiles.list": api.ListProfilesRequest{},
		"images.list": api.ListImagesRequest{}, "secrets.list": api.ListSecretsRequest{}, "credentials.list": api.ListCredentialsRequest{},
	} {
		var out json.RawMessage
		must(beta, method, req, &out)
		for _, acmes := range []string{`"acme"`, node.ID, "acme-host", "acme-os", "acme-join", acmeCred.ID} {
			if strings.Contains(string(out), acmes) {
				t.Errorf("beta's %s shows %s of acme's:\n%s", method, acmes, out)
			}
		}
	}
	// Listing beta's nodes of acme's pool's name shows none, as a pool nobody has does.
	for _, pool := range []string{"train", "walk"} {
		var list api.NodeList
		if must(beta, "metal.list", api.ListNodesRequest{Pool: pool}, &list); len(list.Nodes) != 0 {
			t.Errorf("beta lists the nodes of pool %s: %+v", pool, list.Nodes)
		}
	}

	// The platform's methods: beta holds their actions, and is still refused.
	for method, req := range map[string]any{
		"tenants.create":           api.CreateTenantRequest{Name: "gamma"},
		"tenants.list":             api.ListRequest{},
		"sites.create":             api.CreateSiteRequest{Name: "rack-b", BMCNetworks: []string{"0.0.0.0/0"}},
		"sites.update":             api.UpdateSiteRequest{SiteID: "rack-a", BMCNetworks: &[]string{"0.0.0.0/0"}},
		"sites.list":               api.ListRequest{},
		"sites.cachePlan":          api.SiteRequest{SiteID: "rack-a"},
		"sites.knownMacs":          api.KnownMACsRequest{SiteID: "rack-a"},
		"sites.locations":          api.SiteLocationsRequest{SiteID: "rack-a"},
		"sites.inventory":          api.SiteRequest{SiteID: "rack-a"},
		"sites.revokeCertificates": api.RevokeSiteCertificatesRequest{SiteID: "rack-a"},
		"tokens.create":            api.CreateTokenRequest{Kind: "provisioned", NodeID: node.ID, Site: "rack-a"},
		"tokens.list":              api.ListRequest{},
		"tokens.revoke":            api.RevokeTokenRequest{ID: token.ID},
		"signers.add":              api.AddSignerRequest{TenantID: "beta", ID: "planted", PublicKey: "-----BEGIN PUBLIC KEY-----"},
		"signers.revoke":           api.SignerRequest{TenantID: "acme", ID: "acme-1"},
		"signers.list":             api.ListSignersRequest{TenantID: "acme"},
		"credentials.rotateAdmin":  struct{}{},
	} {
		var out json.RawMessage
		if err := beta.Call(ctx, method, req, &out); proto.CodeOf(err) != proto.Forbidden {
			t.Errorf("beta: %s: %v %s, want FORBIDDEN", method, err, out)
		}
	}

	if diff := cmp.Diff(before, readBack()); diff != "" {
		t.Errorf("what acme and the platform read changed (-before +after):\n%s", diff)
	}
}

// probe is one call beta makes as an attacker: theirs names acme's object, nobodys the
// same kind of object nobody has (id and none, the names that differ between the two).
// Beta must not tell the two apart: both NOT_FOUND (a cursor INVALID_INPUT) with the
// same details and message, which names acme only when beta did.
type probe struct {
	method          string
	theirs, nobodys any
	id, none        string
}

// run makes both calls of p as beta and checks that their refusals read alike.
func (p probe) run(t *testing.T, beta *api.Client) {
	t.Helper()
	t.Run(p.method, func(t *testing.T) {
		method, _, _ := strings.Cut(p.method, " ")
		var theirsOut, nobodysOut json.RawMessage
		ctx := context.Background()
		theirs, nobodys := beta.Call(ctx, method, p.theirs, &theirsOut), beta.Call(ctx, method, p.nobodys, &nobodysOut)
		if theirs == nil || nobodys == nil {
			t.Fatalf("beta naming acme's: %v %s; naming nobody's: %v %s; want both refused", theirs, theirsOut, nobodys, nobodysOut)
		}
		te, ne := proto.AsError(theirs), proto.AsError(nobodys)
		asked, _ := json.Marshal(p.theirs)
		switch {
		case te.Code != proto.NotFound && te.Code != proto.InvalidInput:
			t.Errorf("beta naming acme's: %+v, want NOT_FOUND", te)
		case te.Code != ne.Code || !cmp.Equal(te.Details, ne.Details) ||
			strings.ReplaceAll(te.Message, p.id, "X") != strings.ReplaceAll(ne.Message, p.none, "X"):
			t.Errorf("beta tells acme's from nobody's:\n acme's:   %+v\n nobody's: %+v %s", te, ne, nobodysOut)
		case !strings.Contains(string(asked), "acme/") && strings.Contains(strings.ReplaceAll(te.Message, p.id, "X"), "acme"):
			t.Errorf("the refusal names acme, which beta did not: %+v", te)
		}
	})
}

// flatcarHost is a profile with user data, of id.
func flatcarHost(id string) string {
	return fmt.Sprintf(`{"id": %q, "version": 1, "target": "metal", "image": {"ref": "flatcar@4230.2"},
  "userData": {"kind": "ignition", "template": "bcd-host.ign"}, "steps": [{"use": "userdata.render"}, {"use": "deploy.deploy"}]}`, id)
}

// TestNoVersionOrIDReachesAnotherTenant: tenant beta, holding every action a tenant can
// be given, names tenant acme's things the ways TestNoMethodReachesAnotherTenant does
// not: a profile's private and deleted versions beside its public one (by get, render,
// validate, userdata.preview and as the profile a deploy of beta's own node runs), acme's
// image by its bare id (get, promote), and acme's node as the node of a user-data
// preview of beta's own profile. Each reads exactly as the same call naming nobody's;
// acme's public version, the control, is beta's to read.
func TestNoVersionOrIDReachesAnotherTenant(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	configs := acmeAndBeta(t, reg.AdminConfig, strings.Join(api.Actions, ","))
	ctx := context.Background()
	acme, beta := testkit.Client(t, configs["acme"]), testkit.Client(t, configs["beta"])
	must := func(c *api.Client, method string, req, resp any) {
		t.Helper()
		if err := c.Call(ctx, method, req, resp); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
	}
	version := func(id string, v int) api.Document {
		return api.Document(strings.Replace(flatcarHost(id), `"version": 1`, fmt.Sprintf(`"version": %d`, v), 1))
	}
	// acme-host: version 1 public, 2 private, 3 public and then deleted.
	must(acme, "profiles.create", api.CreateProfileRequest{Document: version("acme-host", 1), Visibility: store.Public}, nil)
	must(acme, "profiles.create", api.CreateProfileRequest{Document: version("acme-host", 2)}, nil)
	must(acme, "profiles.create", api.CreateProfileRequest{Document: version("acme-host", 3), Visibility: store.Public}, nil)
	must(acme, "profiles.delete", api.ProfileKey{ID: "acme-host", ProfileVersion: 3}, nil)
	must(beta, "profiles.create", api.CreateProfileRequest{Document: version("beta-host", 1)}, nil)
	var node, betaNode api.Node
	must(acme, "metal.enroll", api.EnrollRequest{Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}, BMC: api.BMC{Driver: "redfish", Address: "https://127.0.0.2"}}, &node)
	must(beta, "metal.enroll", api.EnrollRequest{Pool: "gpu", MACs: []string{"52:54:00:00:00:02"}, BMC: api.BMC{Driver: "redfish", Address: "https://127.0.0.3"}}, &betaNode)
	var img api.Image
	must(acme, "images.register", api.RegisterImageRequest{Ref: "acme-os@1", Format: "raw", SHA256: strings.Repeat("ab", 32), SizeBytes: new(int64(1)),
		Source: "https://images.example.com/acme-os.raw"}, &img)
	nobodysImage := img.ID[:len(img.ID)-1] + map[bool]string{true: "1", false: "0"}[strings.HasSuffix(img.ID, "0")]
	const nobodysNode = "nd_0123456789abcdef"

	// The control: acme's public version is beta's to read, by its owner's name, and the
	// latest public one is version 1 (3 is deleted, 2 private).
	var pub api.ProfileView
	if must(beta, "profiles.get", api.ProfileKey{ID: "acme/acme-host"}, &pub); pub.Version != 1 {
		t.Fatalf("beta reads acme/acme-host as version %d, want the public version 1", pub.Version)
	}

	key := func(id string, v int) api.ProfileKey { return api.ProfileKey{ID: id, ProfileVersion: v} }
	var probes []probe
	for _, v := range []int{2, 3} {
		what := map[int]string{2: "private", 3: "deleted"}[v]
		theirs, nobodys := key("acme/acme-host", v), key("acme/nobodys-host", v)
		probes = append(probes,
			probe{"profiles.get of acme's " + what + " version", theirs, nobodys, "acme-host", "nobodys-host"},
			probe{"profiles.render of acme's " + what + " version", theirs, nobodys, "acme-host", "nobodys-host"},
			probe{"profiles.validate of acme's " + what + " version", api.ValidateProfileRequest{ProfileKey: theirs},
				api.ValidateProfileRequest{ProfileKey: nobodys}, "acme-host", "nobodys-host"},
			probe{"userdata.preview of acme's " + what + " version", api.PreviewUserDataRequest{ProfileKey: theirs, NodeID: betaNode.ID},
				api.PreviewUserDataRequest{ProfileKey: nobodys, NodeID: betaNode.ID}, "acme-host", "nobodys-host"},
			probe{"metal.deploy of beta's node with acme's " + what + " version",
				api.DeployRequest{NodeID: betaNode.ID, ProfileID: "acme/acme-host", ProfileVersion: v},
				api.DeployRequest{NodeID: betaNode.ID, ProfileID: "acme/nobodys-host", ProfileVersion: v}, "acme-host", "nobodys-host"},
			probe{"profiles.get of acme's " + what + " version by its bare name", key("acme-host", v), key("nobodys-host", v), "acme-host", "nobodys-host"},
		)
	}
	probes = append(probes,
		probe{"images.get of acme's image by its bare id", api.GetImageRequest{ID: img.ID}, api.GetImageRequest{ID: nobodysImage}, img.ID, nobodysImage},
		probe{"images.promote of acme's image by its bare id", api.ImageRequest{ID: img.ID}, api.ImageRequest{ID: nobodysImage}, img.ID, nobodysImage},
	)
	for _, p := range probes {
		p.run(t, beta)
	}

	// A preview of beta's own profile for acme's node reads as one for a node nobody has:
	// it renders from the node id alone, and says nothing of the node.
	t.Run("userdata.preview of beta's profile for acme's node", func(t *testing.T) {
		var theirs, nobodys api.UserDataPreview
		te := beta.Call(ctx, "userdata.preview", api.PreviewUserDataRequest{ProfileKey: key("beta-host", 0), NodeID: node.ID}, &theirs)
		ne := beta.Call(ctx, "userdata.preview", api.PreviewUserDataRequest{ProfileKey: key("beta-host", 0), NodeID: nobodysNode}, &nobodys)
		tb, _ := json.Marshal(struct {
			E error
			P api.UserDataPreview
		}{te, theirs})
		nb, _ := json.Marshal(struct {
			E error
			P api.UserDataPreview
		}{ne, nobodys})
		if strings.ReplaceAll(string(tb), node.ID, "X") != strings.ReplaceAll(string(nb), nobodysNode, "X") {
			t.Errorf("beta tells acme's node from nobody's:\n acme's:   %s\n nobody's: %s", tb, nb)
		}
	})

	// Nothing of acme's changed: the image stays private, no run started on beta's node.
	var still api.Image
	if must(acme, "images.get", api.GetImageRequest{ID: img.ID}, &still); still.Public {
		t.Errorf("acme's image became public: %+v", still)
	}
	var bn api.NodeView
	if must(beta, "metal.get", api.NodeKey{NodeID: betaNode.ID}, &bn); bn.Node.Workflow != betaNode.Workflow {
		t.Errorf("a refused deploy started workflow %s on beta's node", bn.Node.Workflow)
	}
}

// TestCredentialsCreateShowsActionsAsListDoes: the table `credentials create` prints
// gives the new credential's actions as `credentials list` gives them, comma-separated,
// the form --actions takes, so the row can be read back and compared; before, create
// printed Go's form of a list, [compute:profiles:manage compute:profiles:read].
func TestCredentialsCreateShowsActionsAsListDoes(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	testkit.JSON(t, reg.AdminConfig, nil, "tenants", "create", "acme")
	actions := "compute:profiles:manage,compute:profiles:read"
	made := testkit.CLI(t, reg.AdminConfig, "credentials", "create", "--tenant", "acme", "--actions", actions, "--out", filepath.Join(t.TempDir(), "acme.conf"))
	listed := testkit.CLI(t, reg.AdminConfig, "credentials", "list", "--tenant", "acme")
	// cell is the ACTIONS cell of the one row of a table, its third column.
	cell := func(res testkit.Result) string {
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if res.Code != 0 || len(lines) != 2 || len(strings.Fields(lines[1])) < 3 {
			t.Fatalf("exit %d, want a header and one row:\n%s%s", res.Code, res.Stdout, res.Stderr)
		}
		return strings.Fields(lines[1])[2]
	}
	if got, want := cell(made), cell(listed); got != actions || want != actions {
		t.Errorf("ACTIONS: credentials create %q, credentials list %q; want both %q", got, want, actions)
	}
}
