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
	if issues := Check([]byte(readFile(t, "testdata/ubuntu-gpu-host.json"))); len(issues) > 0 {
		t.Errorf("issues: %v", issues)
	}
}

func TestCheckBoundsTheIssues(t *testing.T) {
	doc := `{"id": "t", "version": 1, "target": "metal", "steps": [` + strings.TrimSuffix(strings.Repeat(`{"use": "x", "on": "y", "retries": -1, "await": "z"},`, 256), ",") + `], "cleanup": [` + strings.TrimSuffix(strings.Repeat(`{"use": "x", "on": "y", "retries": -1, "await": "z"},`, 64), ",") + `]}`
	if got := len(Check([]byte(doc))); got != maxIssues {
		t.Errorf("%d issues, want %d", got, maxIssues)
	}
}
