package profile

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/better-compute/better-compute/proto"
)

func TestCheckReportsEveryProblemInDocumentOrder(t *testing.T) {
	doc := `{
  "version": 0,
  "target": "metal",
  "userData": {"kind": "cloud-init", "template": "bcd-host.yaml.hbs"},
  "hostConfig": {"nvidia-driver": {"branch": "58"}, "sysctl": {"kernel.kptr_restrict": 0}},
  "steps": [
    {"use": "deploy.deploy"},
    {"use": "power.setPower", "with": {"action": "reboot"}, "timeout": "5"},
    {"use": "userdata.render", "on": "site"},
    {"use": "power.dance"}
  ],
  "cleanup": [{"use": "boot.cleanUp", "retries": 11, "extra": true}],
  "image": {"ref": "os@1", "format": "iso"}
}`
	var got []string
	for _, i := range Check([]byte(doc)) {
		if i.Code != proto.InvalidConfig {
			t.Errorf("%s: code %s", i.Path, i.Code)
		}
		got = append(got, i.Path)
	}
	want := []string{
		"version",
		"hostConfig.nvidia-driver.branch",
		"hostConfig.sysctl.kernel.kptr_restrict",
		"steps[0]", // deploy.deploy before userdata.render
		"steps[1].with.action",
		"steps[1].timeout",
		"steps[2].on",
		"steps[3].use",
		"cleanup[0].retries",
		"cleanup[0].extra",
		"image.format", // deploy.deploy cannot write an iso
		"id",           // missing: named at the end of the document
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("issue paths (-want +got):\n%s", diff)
	}
	_, err := Define([]byte(doc))
	if e := proto.AsError(err); e.Details.Path != "version" {
		t.Errorf("Define fails at %q, want the first issue's path", e.Details.Path)
	}
}

func TestCheckAcceptsAValidDocument(t *testing.T) {
	if issues := Check([]byte(specExample(t))); len(issues) > 0 {
		t.Errorf("issues: %v", issues)
	}
}

func TestCheckBoundsTheIssues(t *testing.T) {
	doc := `{"id": "t", "version": 1, "target": "metal", "steps": [` + strings.TrimSuffix(strings.Repeat(`{"use": "x", "on": "y", "retries": -1, "await": "z"},`, 256), ",") + `], "cleanup": [` + strings.TrimSuffix(strings.Repeat(`{"use": "x", "on": "y", "retries": -1, "await": "z"},`, 64), ",") + `]}`
	if got := len(Check([]byte(doc))); got != maxIssues {
		t.Errorf("%d issues, want %d", got, maxIssues)
	}
}

// TestDefineStoredRefusesAStoredProfileTheChecksNoLongerPass: a stored version that the
// checks refuse today is INVALID_STATE naming it and what to run, never INVALID_CONFIG
// (the caller's input is not at fault); one that passes is defined as Define defines it.
func TestDefineStoredRefusesAStoredProfileTheChecksNoLongerPass(t *testing.T) {
	_, err := DefineStored("old-host", 3, []byte(`{"id": "old-host", "version": 3, "target": "metal", "steps": [{"use": "power.dance"}]}`))
	if e := proto.AsError(err); e.Code != proto.InvalidState || !strings.Contains(e.Message, "stored profile old-host@3 no longer passes the checks") || !strings.Contains(e.Message, "`profiles validate`") {
		t.Fatalf("a stored profile the checks refuse: %v, want INVALID_STATE naming old-host@3", err)
	}
	doc := specExample(t)
	want, err := Define([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	got, err := DefineStored(want.ID(), want.Version(), []byte(doc))
	if err != nil || got.ID() != want.ID() || got.Version() != want.Version() {
		t.Fatalf("a stored profile that passes: %v, %v", got, err)
	}
}
