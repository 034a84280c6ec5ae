package cli_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// TestAStrangerPastItsSecretsBoundThroughTheCLI: on a registry serving with
// --tenant-secrets 2, acme's credential that may manage secrets puts two of 64 KiB and
// is refused a third, INVALID_STATE quota at ref naming the flag and `secrets delete`,
// and the third is not stored; beta is still served; acme deleting one frees a place.
// Before, a tenant's credential put secrets without bound into the store every tenant
// shares.
func TestAStrangerPastItsSecretsBoundThroughTheCLI(t *testing.T) {
	reg := testkit.StartRegistry(t, "", "--tenant-secrets", "2")
	configs := acmeAndBeta(t, reg.AdminConfig, api.ActionSecretsManage)
	value := writeDoc(t, strings.Repeat("x", api.MaxSecretValue))
	put := func(tenant string, i int) testkit.Result {
		return testkit.CLI(t, configs[tenant], "secrets", "put", "--ref", fmt.Sprintf("secret://s/%d", i), "--file", value, "--format", "json")
	}
	for i := range 2 {
		if res := put("acme", i); res.Code != 0 {
			t.Fatalf("acme's secret %d within its bound: exit %d\n%s%s", i, res.Code, res.Stdout, res.Stderr)
		}
	}
	res := put("acme", 2)
	var e testkit.ErrorObject
	json.Unmarshal([]byte(res.Stdout), &e)
	if res.Code != 1 || e.Code != string(proto.InvalidState) || e.Details.Reason != proto.ReasonQuota || e.Details.Path != "ref" ||
		!strings.Contains(e.Message, "--tenant-secrets") || !strings.Contains(e.Message, "secrets delete") {
		t.Fatalf("acme's third secret: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	var list api.SecretList
	testkit.JSON(t, configs["acme"], &list, "secrets", "list")
	if len(list.Secrets) != 2 {
		t.Fatalf("acme's secrets after the refusal: %+v, want the two it put", list.Secrets)
	}
	if res := put("beta", 0); res.Code != 0 {
		t.Fatalf("beta's secret beside acme at its bound: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	testkit.JSON(t, configs["acme"], nil, "secrets", "delete", "--ref", "secret://s/0")
	if res := put("acme", 2); res.Code != 0 {
		t.Fatalf("acme's secret after it deleted one: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}
