package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry/api"
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
	testkit.JSON(t, confs["beta"], &shared, "profiles", "get", "shared-recipe")
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
