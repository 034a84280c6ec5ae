package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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

// refusedQuota fails t unless res is the CLI's refusal INVALID_STATE, reason quota, at
// path, naming flag, the bound's.
func refusedQuota(t *testing.T, what string, res testkit.Result, path, flag string) {
	t.Helper()
	var e testkit.ErrorObject
	json.Unmarshal([]byte(res.Stdout), &e)
	if res.Code != 1 || e.Code != string(proto.InvalidState) || e.Details.Reason != proto.ReasonQuota || e.Details.Path != path || !strings.Contains(e.Message, flag) {
		t.Fatalf("%s past the bound: exit %d\n%s%s\nwant INVALID_STATE quota at %s naming %s", what, res.Code, res.Stdout, res.Stderr, path, flag)
	}
}

// TestAStrangerPastItsCredentialsPoolsAndNodesBoundsThroughTheCLI: on a registry serving
// with --tenant-credentials 2, --tenant-pools 2 and --tenant-nodes 2, acme's credential
// that may manage credentials, pools and nodes (the first of its credentials, in the
// platform-made pool gpu, the first of its pools) makes one more credential and pool and
// enrolls two machines, and is refused the next of each, INVALID_STATE quota at tenantId,
// name and pool naming the flag, nothing made: the refused credential's config file is
// not written and the lists show what acme held; beta is still served, and the root
// tenant's credential enrolling a machine for acme is not refused. Before, a tenant's
// credential made credentials, pools and nodes without bound in the store every tenant
// shares.
func TestAStrangerPastItsCredentialsPoolsAndNodesBoundsThroughTheCLI(t *testing.T) {
	reg := testkit.StartRegistry(t, "", "--tenant-credentials", "2", "--tenant-pools", "2", "--tenant-nodes", "2")
	configs := acmeAndBeta(t, reg.AdminConfig, strings.Join([]string{api.ActionCredentialsManage, api.ActionPoolsManage, api.ActionNodesManage, api.ActionNodesRead}, ","))
	dir := t.TempDir()
	credential := func(tenant string, i int) (testkit.Result, string) {
		out := filepath.Join(dir, fmt.Sprintf("%s-%d.conf", tenant, i))
		return testkit.CLI(t, configs[tenant], "credentials", "create", "--actions", api.ActionNodesRead, "--out", out, "--format", "json"), out
	}
	pool := func(tenant, name string) testkit.Result {
		return testkit.CLI(t, configs[tenant], "pools", "create", name, "--site", "rack-a", "--format", "json")
	}
	enroll := func(config string, i int, bmc string, tenant ...string) testkit.Result {
		args := append([]string{"nodes", "enroll", "--pool", "gpu", "--mac", fmt.Sprintf("52:54:00:00:00:%02x", i), "--bmc-driver", "redfish", "--bmc-address", bmc, "--format", "json"}, tenant...)
		return testkit.CLI(t, config, args...)
	}
	ok := func(what string, res testkit.Result) {
		t.Helper()
		if res.Code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", what, res.Code, res.Stdout, res.Stderr)
		}
	}

	res, _ := credential("acme", 1)
	ok("acme's second credential", res)
	res, out := credential("acme", 2)
	refusedQuota(t, "acme's third credential", res, "tenantId", "--tenant-credentials")
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused credential's config file: %v, want none written", err)
	}
	var creds api.CredentialList
	testkit.JSON(t, configs["acme"], &creds, "credentials", "list")
	if len(creds.Credentials) != 2 {
		t.Errorf("acme's credentials after the refusal: %d, want the 2 it held", len(creds.Credentials))
	}
	res, _ = credential("beta", 1)
	ok("beta's second credential beside acme at its bound", res)

	ok("acme's second pool", pool("acme", "cpu"))
	refusedQuota(t, "acme's third pool", pool("acme", "spare"), "name", "--tenant-pools")
	var pools api.PoolList
	testkit.JSON(t, configs["acme"], &pools, "pools", "list")
	if len(pools.Pools) != 2 {
		t.Errorf("acme's pools after the refusal: %+v, want the 2 it held", pools.Pools)
	}
	ok("beta's second pool beside acme at its bound", pool("beta", "cpu"))

	for i := range 2 {
		ok(fmt.Sprintf("acme's node %d", i), enroll(configs["acme"], i, "https://127.0.0.2"))
	}
	refusedQuota(t, "acme's third node", enroll(configs["acme"], 2, "https://127.0.0.2"), "pool", "--tenant-nodes")
	var nodes api.NodeList
	testkit.JSON(t, configs["acme"], &nodes, "nodes", "list")
	if len(nodes.Nodes) != 2 {
		t.Errorf("acme's nodes after the refusal: %+v, want the 2 it enrolled", nodes.Nodes)
	}
	ok("beta's node beside acme at its bound", enroll(configs["beta"], 3, "https://127.0.0.3"))
	ok("the platform's machine enrolled for acme at its bound", enroll(reg.AdminConfig, 2, "https://127.0.0.2", "--tenant", "acme"))
}
