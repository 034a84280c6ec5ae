package cli_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// example is the spec's GPU host profile as the README's demo uses it.
const example = "../examples/ubuntu-gpu-host.json"

func writeDoc(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestExampleProfileThroughTheCLI(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig

	var created api.ProfileView
	testkit.JSON(t, admin, &created, "profiles", "create", example, "--tenant", "root")
	if created.ID != "ubuntu-24.04-gpu-host" || created.Version != 1 || created.Visibility != "private" || created.Rev != 1 {
		t.Fatalf("created %+v", created)
	}
	if e := testkit.Fails(t, admin, "profiles", "create", example, "--tenant", "root"); e.Code != "CONFLICT" {
		t.Errorf("same version again: %+v", e)
	}

	var v api.Validation
	testkit.JSON(t, admin, &v, "profiles", "validate", "ubuntu-24.04-gpu-host", "--tenant", "root", "--profile-version", "1")
	if !v.Valid || len(v.Issues) != 0 {
		t.Errorf("validate: %+v", v)
	}

	var r api.Rendering
	testkit.JSON(t, admin, &r, "profiles", "render", "ubuntu-24.04-gpu-host", "--tenant", "root")
	if len(r.Steps) != 10 {
		t.Fatalf("render: %d steps, want 8 main + 1 acceptance + 1 cleanup", len(r.Steps))
	}
	deploy := r.Steps[5]
	if deploy.Use != "deploy.deploy" || deploy.On != "ramdisk" || deploy.TimeoutSeconds != 1800 {
		t.Errorf("deploy step: %+v", deploy)
	}
	if last := r.Steps[9]; last.Phase != "cleanup" || last.Use != "boot.cleanUp" || last.On != "site" {
		t.Errorf("cleanup step: %+v", last)
	}

	// The table forms people read.
	if res := testkit.CLI(t, admin, "profiles", "render", "ubuntu-24.04-gpu-host"); res.Code != 0 || !strings.Contains(res.Stdout, "deploy.deploy") {
		t.Errorf("render table: %d %s %s", res.Code, res.Stdout, res.Stderr)
	}
	if res := testkit.CLI(t, admin, "profiles", "list"); res.Code != 0 || !strings.Contains(res.Stdout, "metal-enroll") || !strings.Contains(res.Stdout, "ubuntu-24.04-gpu-host") {
		t.Errorf("list table: %d %s %s", res.Code, res.Stdout, res.Stderr)
	}
}

func TestBadDocumentsChangeNothing(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	cases := map[string]struct{ doc, path string }{
		"not json":      {`{"id": "x",`, "$"},
		"bad id":        {`{"id":"Bad","version":1,"target":"metal"}`, "id"},
		"bad timeout":   {`{"id":"x","version":1,"target":"metal","steps":[{"use":"power.getPower"},{"use":"power.getPower"},{"use":"power.getPower","timeout":"soon"}]}`, "steps[2].timeout"},
		"unknown field": {`{"id":"x","version":1,"target":"metal","colour":"red"}`, "colour"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := testkit.Fails(t, admin, "profiles", "create", writeDoc(t, tc.doc))
			if e.Code != "INVALID_INPUT" || e.Details.Path != tc.path {
				t.Errorf("got %s at %q (%s), want INVALID_INPUT at %q", e.Code, e.Details.Path, e.Message, tc.path)
			}
		})
	}
	var list api.ProfileList
	testkit.JSON(t, admin, &list, "profiles", "list")
	for _, p := range list.Profiles {
		if p.TenantID != "builtin" {
			t.Errorf("a refused document was stored: %+v", p)
		}
	}
	// validate --file reports every problem at once, and exits 1.
	res := testkit.CLI(t, admin, "profiles", "validate", "--file", writeDoc(t, `{"id":"Bad","version":0,"target":"metal","steps":[{"use":"nope"}]}`), "--format", "json")
	if res.Code != 1 || strings.Count(res.Stdout, `"path"`) < 3 {
		t.Errorf("validate --file: exit %d\n%s", res.Code, res.Stdout)
	}
}

func TestTenantsDoNotSeeEachOthersPrivateProfiles(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	dir := t.TempDir()
	confs := map[string]string{}
	for _, tn := range []string{"alpha", "beta"} {
		testkit.JSON(t, admin, nil, "tenants", "create", tn)
		confs[tn] = filepath.Join(dir, tn+".conf")
		testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", tn, "--actions", "compute:profiles:manage,compute:profiles:read", "--out", confs[tn])
	}
	doc := func(id string) string {
		return writeDoc(t, `{"id":"`+id+`","version":1,"target":"metal","steps":[{"use":"power.getPower"}]}`)
	}
	testkit.JSON(t, confs["alpha"], nil, "profiles", "create", doc("secret-recipe"))
	testkit.JSON(t, confs["alpha"], nil, "profiles", "create", doc("shared-recipe"), "--public")

	if e := testkit.Fails(t, confs["beta"], "profiles", "get", "secret-recipe"); e.Code != "NOT_FOUND" {
		t.Errorf("beta got alpha's private profile: %+v", e)
	}
	if e := testkit.Fails(t, confs["beta"], "profiles", "get", "secret-recipe", "--tenant", "alpha"); e.Code != "NOT_FOUND" {
		t.Errorf("beta acting for alpha: %+v", e)
	}
	if e := testkit.Fails(t, confs["beta"], "profiles", "delete", "shared-recipe"); e.Code != "NOT_FOUND" {
		t.Errorf("beta deleted alpha's public profile: %+v", e)
	}
	var shared api.ProfileView
	testkit.JSON(t, confs["beta"], &shared, "profiles", "get", "alpha/shared-recipe")
	if shared.TenantID != "alpha" {
		t.Errorf("public profile: %+v", shared)
	}
	var list api.ProfileList
	testkit.JSON(t, confs["beta"], &list, "profiles", "list")
	for _, p := range list.Profiles {
		if p.ID == "secret-recipe" {
			t.Errorf("beta lists alpha's private profile")
		}
	}
	// A reader may not write.
	reader := filepath.Join(dir, "reader.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "beta", "--actions", "compute:profiles:read", "--out", reader)
	if e := testkit.Fails(t, reader, "profiles", "create", doc("x")); e.Code != "FORBIDDEN" {
		t.Errorf("reader creating: %+v", e)
	}
}

func TestUpdateAndDelete(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	v1 := writeDoc(t, `{"id":"p","version":1,"target":"metal","steps":[{"use":"power.getPower"}]}`)
	v1b := writeDoc(t, `{"id":"p","version":1,"target":"metal","description":"changed","steps":[{"use":"power.getPower"}]}`)
	testkit.JSON(t, admin, nil, "profiles", "create", v1)

	if e := testkit.Fails(t, admin, "profiles", "update", "p", "--file", v1b, "--if-version", "5"); e.Code != "CONFLICT" {
		t.Errorf("stale guard: %+v", e)
	}
	var up api.ProfileView
	testkit.JSON(t, admin, &up, "profiles", "update", "p", "--file", v1b, "--if-version", "1")
	if up.Rev != 2 || !strings.Contains(string(up.Document), "changed") {
		t.Errorf("update: %+v", up)
	}
	testkit.JSON(t, admin, &up, "profiles", "update", "p", "--visibility", "public")
	if up.Visibility != "public" || up.Rev != 3 {
		t.Errorf("visibility: %+v", up)
	}
	if e := testkit.Fails(t, admin, "profiles", "update", "p", "--visibility", "open"); e.Code != "INVALID_INPUT" || e.Details.Path != "visibility" {
		t.Errorf("bad visibility: %+v", e)
	}
	testkit.JSON(t, admin, nil, "profiles", "delete", "p")
	if e := testkit.Fails(t, admin, "profiles", "get", "p"); e.Code != "NOT_FOUND" {
		t.Errorf("deleted profile: %+v", e)
	}
	// Shipped profiles are there for everyone and cannot be changed.
	var shipped api.ProfileView
	testkit.JSON(t, admin, &shipped, "profiles", "get", "metal-enroll")
	if shipped.TenantID != "builtin" || !shipped.Used {
		t.Errorf("shipped: %+v", shipped)
	}
	if e := testkit.Fails(t, admin, "profiles", "delete", "metal-enroll"); e.Code != "NOT_FOUND" {
		t.Errorf("deleting a shipped profile: %+v", e)
	}
}

// tenantConf makes tenant with a credential of actions and returns its CLI config.
func tenantConf(t *testing.T, admin, tenant, actions string) string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), tenant+".conf")
	testkit.JSON(t, admin, nil, "tenants", "create", tenant)
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", tenant, "--actions", actions, "--out", conf)
	return conf
}

// eraser is a profile a hostile tenant would like other tenants to run.
func eraser(id string, version int) string {
	return fmt.Sprintf(`{"id":%q,"version":%d,"target":"metal","steps":[{"use":"metal.ensureRamdisk"},{"use":"disk.wipe","with":{"mode":"crypto-erase"}},{"use":"power.setPower","with":{"action":"off"}}]}`, id, version)
}

// A tenant can neither take a shipped id nor make what another tenant's bare profile
// name resolves to: another tenant's public profile is reached only by TENANT/ID.
func TestNoTenantChangesWhatAnotherTenantsProfileNameResolvesTo(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	const actions = "compute:profiles:manage,compute:profiles:read,compute:nodes:manage"
	alpha := tenantConf(t, admin, "alpha", actions)
	beta := tenantConf(t, admin, "beta", actions)

	// Shipped ids are reserved, for every tenant, root included.
	for _, caller := range []string{alpha, admin} {
		e := testkit.Fails(t, caller, "profiles", "create", writeDoc(t, eraser("metal-inspect", 3)), "--public")
		if e.Code != "CONFLICT" || e.Details.Path != "id" || e.Details.Reason != "reserved-id" {
			t.Errorf("creating metal-inspect: %+v, want CONFLICT at id with reason reserved-id", e)
		}
	}
	var shipped api.ProfileView
	testkit.JSON(t, beta, &shipped, "profiles", "get", "metal-inspect")
	if shipped.TenantID != "builtin" || shipped.Version != 2 {
		t.Errorf("beta's metal-inspect: %s@%d of %s, want the shipped one", shipped.ID, shipped.Version, shipped.TenantID)
	}

	// alpha's public gpu-host is not what beta's (or root's) bare gpu-host names.
	testkit.JSON(t, alpha, nil, "profiles", "create", writeDoc(t, eraser("gpu-host", 1)), "--public")
	for name, caller := range map[string]string{"beta": beta, "root": admin} {
		for _, cmd := range []string{"get", "render", "validate"} {
			if e := testkit.Fails(t, caller, "profiles", cmd, "gpu-host"); e.Code != "NOT_FOUND" {
				t.Errorf("%s: profiles %s gpu-host: %+v, want NOT_FOUND", name, cmd, e)
			}
		}
		// metal.deploy resolves the profile before the node: a profile it resolves
		// makes the missing node the error.
		if e := testkit.Fails(t, caller, "nodes", "deploy", "node-missing", "--profile", "gpu-host"); e.Code != "NOT_FOUND" || e.Details.Path != "profileId" {
			t.Errorf("%s: nodes deploy --profile gpu-host: %+v, want NOT_FOUND at profileId", name, e)
		}
		var got api.ProfileView
		testkit.JSON(t, caller, &got, "profiles", "get", "alpha/gpu-host")
		if got.TenantID != "alpha" || got.ID != "gpu-host" {
			t.Errorf("%s: alpha/gpu-host is %+v", name, got)
		}
		var r api.Rendering
		testkit.JSON(t, caller, &r, "profiles", "render", "alpha/gpu-host", "--profile-version", "1")
		if r.TenantID != "alpha" || len(r.Steps) != 3 {
			t.Errorf("%s: rendering alpha/gpu-host: %+v", name, r)
		}
		var v api.Validation
		testkit.JSON(t, caller, &v, "profiles", "validate", "alpha/gpu-host")
		if !v.Valid {
			t.Errorf("%s: validating alpha/gpu-host: %+v", name, v)
		}
		if e := testkit.Fails(t, caller, "nodes", "deploy", "node-missing", "--profile", "alpha/gpu-host"); e.Code != "NOT_FOUND" || e.Details.Path != "nodeId" {
			t.Errorf("%s: nodes deploy --profile alpha/gpu-host: %+v, want the node NOT_FOUND", name, e)
		}
	}
	// A private profile stays private under its qualified name; a malformed owner is
	// INVALID_INPUT at id; the platform's public profiles resolve by their bare name.
	testkit.JSON(t, alpha, nil, "profiles", "create", writeDoc(t, eraser("quiet", 1)))
	if e := testkit.Fails(t, beta, "profiles", "get", "alpha/quiet"); e.Code != "NOT_FOUND" {
		t.Errorf("beta gets alpha's private profile by its qualified name: %+v", e)
	}
	if e := testkit.Fails(t, beta, "profiles", "get", "Alpha/gpu-host"); e.Code != "INVALID_INPUT" || e.Details.Path != "id" {
		t.Errorf("a malformed owner: %+v", e)
	}
	testkit.JSON(t, admin, nil, "profiles", "create", writeDoc(t, eraser("platform-host", 1)), "--public")
	var platform api.ProfileView
	testkit.JSON(t, beta, &platform, "profiles", "get", "platform-host")
	if platform.TenantID != "root" {
		t.Errorf("beta's platform-host: %+v", platform)
	}
	var own api.ProfileView
	testkit.JSON(t, alpha, &own, "profiles", "get", "builtin/metal-inspect")
	if own.TenantID != "builtin" {
		t.Errorf("builtin/metal-inspect: %+v", own)
	}
}

// Rows stored before shipped ids were reserved never shadow the shipped profile; their
// tenant still reaches them by their qualified name, and can delete them.
func TestStoredRowsWithAShippedIDDoNotShadowIt(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "tenants", "create", "alpha")
	reg.Stop()
	st, err := store.Open(reg.DataDir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(func(tx *store.Tx) error {
		for _, tenant := range []string{"alpha", "root"} {
			if _, err := tx.CreateProfile(store.ProfileRecord{Tenant: tenant, ID: "metal-inspect", Version: 2, Visibility: store.Public, Document: []byte(eraser("metal-inspect", 2))}); err != nil {
				return err
			}
		}
		return nil
	})
	if err := errors.Join(err, st.Close()); err != nil {
		t.Fatal(err)
	}
	testkit.StartRegistry(t, reg.DataDir)
	alpha := filepath.Join(t.TempDir(), "alpha.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "alpha", "--actions", "compute:profiles:manage,compute:profiles:read", "--out", alpha)

	for name, caller := range map[string]string{"alpha": alpha, "root": admin} {
		var got api.ProfileView
		testkit.JSON(t, caller, &got, "profiles", "get", "metal-inspect", "--profile-version", "2")
		if got.TenantID != "builtin" {
			t.Errorf("%s: metal-inspect@2 is %s's", name, got.TenantID)
		}
	}
	var legacy api.ProfileView
	testkit.JSON(t, alpha, &legacy, "profiles", "get", "alpha/metal-inspect")
	if legacy.TenantID != "alpha" {
		t.Errorf("alpha/metal-inspect: %+v", legacy)
	}
	testkit.JSON(t, alpha, nil, "profiles", "delete", "metal-inspect")
	if e := testkit.Fails(t, alpha, "profiles", "get", "alpha/metal-inspect"); e.Code != "NOT_FOUND" {
		t.Errorf("after delete: %+v", e)
	}
}

// TestProfileOfHTMLCharactersThroughTheCLI creates, through the CLI and the API client, a
// profile document of the largest size a profile may be whose driver config is <, > and
// & over and over, then reads it back: encoding/json's Marshal writes each of those as six
// bytes (\u003c), which made the request six times the document and over the API's bound.
func TestProfileOfHTMLCharactersThroughTheCLI(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	head, tail := `{"id":"html-heavy","version":1,"target":"metal","drivers":{"virtual-media":{"driver":"redfish","config":{"pad":"`, `"}}}}`
	doc := head + strings.Repeat("<>&", proto.MaxProfileDocument)[:proto.MaxProfileDocument-len(head)-len(tail)] + tail
	var created api.ProfileView
	testkit.JSON(t, reg.AdminConfig, &created, "profiles", "create", writeDoc(t, doc), "--tenant", "root")
	if created.ID != "html-heavy" || created.Version != 1 {
		t.Fatalf("created %+v", created)
	}
	var got api.ProfileView
	testkit.JSON(t, reg.AdminConfig, &got, "profiles", "get", "html-heavy", "--tenant", "root")
	type pad struct {
		Drivers struct {
			VirtualMedia struct{ Config struct{ Pad string } } `json:"virtual-media"`
		}
	}
	var back, want pad
	if err := json.Unmarshal(got.Document, &back); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(doc), &want); err != nil {
		t.Fatal(err)
	}
	if got, want := back.Drivers.VirtualMedia.Config.Pad, want.Drivers.VirtualMedia.Config.Pad; got != want || len(want) < proto.MaxProfileDocument-200 {
		t.Errorf("the driver config read back differs: %d bytes, want %d", len(got), len(want))
	}
}

// TestProfileVersionIsReadInDecimal: `--profile-version 010` names no version 8 (strconv's
// base 0 reads it so) nor 10: it is refused at the flag before any call (exit 2), and the
// same command with 10 gets version 10. A profile with both versions tells them apart.
func TestProfileVersionIsReadInDecimal(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	for _, v := range []int{8, 10} {
		testkit.JSON(t, reg.AdminConfig, nil, "profiles", "create", writeDoc(t, fmt.Sprintf(`{"id":"p","version":%d,"target":"metal","steps":[{"use":"power.getPower"}]}`, v)))
	}
	for _, v := range []string{"010", "0x10", "1_000", "+10"} {
		res := testkit.CLI(t, reg.AdminConfig, "profiles", "get", "p", "--profile-version", v, "--format", "json")
		var e testkit.ErrorObject
		json.Unmarshal([]byte(res.Stdout), &e)
		if res.Code != 2 || e.Code != string(proto.InvalidInput) || e.Details.Path != "--profile-version" || !strings.Contains(e.Message, "decimal digits") {
			t.Errorf("profiles get p --profile-version %s: exit %d, want 2, INVALID_INPUT at --profile-version\n%s%s", v, res.Code, res.Stdout, res.Stderr)
		}
	}
	var got api.ProfileView
	testkit.JSON(t, reg.AdminConfig, &got, "profiles", "get", "p", "--profile-version", "10")
	if got.Version != 10 {
		t.Errorf("profiles get p --profile-version 10: version %d", got.Version)
	}
}

// TestProfileListRefusesAForgedCursor: a cursor is opaque, but a client can send any
// text. One that names a place past the shipped profiles is INVALID_INPUT at cursor,
// as any cursor the list did not return; before, the registry indexed the shipped
// profiles with it, the call's handler panicked, and the CLI was left with a dropped
// connection instead of an answer.
func TestProfileListRefusesAForgedCursor(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	for name, raw := range map[string]string{
		"an index of -1":            "s\xff\xff\xff\xff\xff\xff\xff\xff",
		"an index past the shipped": "s\x00\x00\x00\x00\x00\x00\x10\x00",
		"a short index":             "s\x01",
	} {
		t.Run(name, func(t *testing.T) {
			e := testkit.Fails(t, admin, "profiles", "list", "--cursor", base64.RawURLEncoding.EncodeToString([]byte(raw)))
			if e.Code != "INVALID_INPUT" || e.Details.Path != "cursor" {
				t.Errorf("got %s at %q (%s), want INVALID_INPUT at cursor", e.Code, e.Details.Path, e.Message)
			}
		})
	}
	var list api.ProfileList
	testkit.JSON(t, admin, &list, "profiles", "list")
	if len(list.Profiles) == 0 {
		t.Errorf("profiles list after the forged cursors: %+v", list)
	}
}

// TestProfileOfEscapedCharactersThroughTheCLI is TestProfileOfHTMLCharactersThroughTheCLI
// for the characters a JSON string must escape: a document of the largest size a profile
// may be whose driver config is \" over and over. The CLI sends a document as the text
// of a JSON string, where each of those bytes takes two, so the request is twice the
// document and the request's other fields: for a tenant of 25 characters it was refused
// as over the API's 2 MiB bound, and so was `profiles update --file` with its flags,
// although the document is within its own bound.
func TestProfileOfEscapedCharactersThroughTheCLI(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	const tenant = "acme-production-eu-west-1"
	testkit.JSON(t, reg.AdminConfig, nil, "tenants", "create", tenant)
	head, tail := `{"id":"q","version":1,"target":"metal","drivers":{"boot":{"driver":"a","config":{"p":"`, `"}}}}`
	pad := strings.Repeat(`\"`, proto.MaxProfileDocument)[:proto.MaxProfileDocument-len(head)-len(tail)]
	if len(pad)%2 == 1 {
		pad = pad[:len(pad)-1] + " "
	}
	doc := head + pad + tail
	req, err := proto.Marshal(api.CreateProfileRequest{TenantID: tenant, Document: api.Document(doc), Visibility: "private"})
	if err != nil || len(doc) != proto.MaxProfileDocument || len(req) <= 2<<20 {
		t.Fatalf("a document of %d bytes makes a request of %d (%v): want one of 1 MiB, in a request over 2 MiB", len(doc), len(req), err)
	}
	var v api.Validation
	testkit.JSON(t, reg.AdminConfig, &v, "profiles", "validate", "--file", writeDoc(t, doc), "--tenant", tenant)
	if !v.Valid {
		t.Fatalf("validate --file: %+v", v)
	}
	var got api.ProfileView
	testkit.JSON(t, reg.AdminConfig, &got, "profiles", "create", writeDoc(t, doc), "--tenant", tenant)
	if got.ID != "q" || got.Version != 1 {
		t.Fatalf("created %+v", got)
	}
	testkit.JSON(t, reg.AdminConfig, &got, "profiles", "update", "q", "--file", writeDoc(t, doc), "--tenant", tenant, "--profile-version", "1", "--if-version", "1")
	if got.Rev != 2 {
		t.Errorf("update --file: %+v", got)
	}
	var back struct {
		Drivers struct {
			Boot struct{ Config struct{ P string } }
		}
	}
	testkit.JSON(t, reg.AdminConfig, &got, "profiles", "get", "q", "--tenant", tenant)
	if err := json.Unmarshal(got.Document, &back); err != nil || len(back.Drivers.Boot.Config.P) < len(pad)/2 {
		t.Errorf("the driver config read back is %d bytes (%v), want %d", len(back.Drivers.Boot.Config.P), err, len(pad)/2)
	}
}

// TestProfilesDeleteSaysItHidesEveryVersion: `profiles delete ID` without
// --profile-version hides every version of the profile (profiles.delete leaves none out),
// and its help says so; it said the flag defaulted to the latest version, as the other
// profiles commands' does, so an operator meaning to hide the latest hid them all.
func TestProfilesDeleteSaysItHidesEveryVersion(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	res := testkit.CLI(t, admin, "profiles", "delete", "--help")
	var help string
	for _, line := range strings.Split(res.Stdout, "\n") {
		if strings.Contains(line, "--profile-version") {
			help = line
		}
	}
	if res.Code != 0 || strings.Contains(help, "latest") || !strings.Contains(help, "every version") {
		t.Errorf("profiles delete --help: exit %d, --profile-version: %q; want it to say that leaving it out hides every version", res.Code, help)
	}
	for v := 1; v <= 2; v++ {
		testkit.JSON(t, admin, nil, "profiles", "create", writeDoc(t, fmt.Sprintf(`{"id":"p","version":%d,"target":"metal","steps":[{"use":"power.getPower"}]}`, v)))
	}
	var deleted api.DeletedProfiles
	testkit.JSON(t, admin, &deleted, "profiles", "delete", "p")
	if fmt.Sprint(deleted.Versions) != "[1 2]" {
		t.Errorf("profiles delete p hid versions %v, want [1 2]", deleted.Versions)
	}
}
