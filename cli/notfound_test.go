package cli_test

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/testkit"
)

// nextStep is a command an error names for its reader to run, such as `nodes list`.
// A credential of another tenant than root is told to leave --tenant out instead.
var nextStep = regexp.MustCompile("`[a-z-]+ [a-z-]+[^`]*`|leave --tenant out")

// TestNotFoundSaysWhatToRun: every command naming something that does not exist (a
// mistyped id or name, another tenant's) is NOT_FOUND at the field that named it, and
// says which command shows what there is: the reader's next step. Before, most said only
// that it was not found (a node through nodes get, events, inventory, update-bmc; a
// workflow, pool, site, tenant, credential, image, secret; a profile through profiles
// delete), while others of the same kind named the command to run.
func TestNotFoundSaysWhatToRun(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	acme := filepath.Join(t.TempDir(), "acme.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:pools:manage", "--out", acme)
	for _, tc := range []struct {
		config string
		args   []string
		path   string
	}{
		{admin, []string{"nodes", "get", "nd_nope"}, "nodeId"},
		{admin, []string{"nodes", "events", "nd_nope"}, "nodeId"},
		{admin, []string{"nodes", "inventory", "nd_nope"}, "nodeId"},
		{admin, []string{"nodes", "attestation", "nd_nope"}, "nodeId"},
		{admin, []string{"nodes", "attest", "accept", "nd_nope", "--boot", "sha256:" + strings.Repeat("0", 64)}, "nodeId"},
		{admin, []string{"nodes", "update-bmc", "nd_nope", "--bmc-driver", "qmp"}, "nodeId"},
		{admin, []string{"workflows", "get", "wf_nope"}, "id"},
		{admin, []string{"workflows", "attestation", "wf_nope", "--step", "0", "--out", t.TempDir() + "/a"}, "id"},
		{admin, []string{"pools", "get", "nope"}, "name"},
		{admin, []string{"pools", "update", "nope", "--prewarm", ""}, "name"},
		{admin, []string{"pools", "create", "gpu", "--site", "nope"}, "siteId"},
		{admin, []string{"sites", "update", "nope", "--bmc-networks", ""}, "siteId"},
		{admin, []string{"sites", "cache-plan", "nope"}, "siteId"},
		{admin, []string{"sites", "locations", "nope"}, "siteId"},
		{admin, []string{"sites", "revoke-identity", "nope"}, "siteId"},
		{admin, []string{"pools", "list", "--tenant", "nope"}, "tenantId"},
		{acme, []string{"pools", "list", "--tenant", "nope"}, "tenantId"},
		{admin, []string{"credentials", "revoke", "0123456789abcdef"}, "id"},
		{admin, []string{"images", "get", "img_nope"}, "id"},
		{admin, []string{"images", "promote", "img_nope"}, "id"},
		{admin, []string{"secrets", "delete", "--ref", "secret://nope"}, "ref"},
		{admin, []string{"profiles", "delete", "nope"}, "id"},
		{admin, []string{"nodes", "enroll", "--pool", "nope", "--mac", "52:54:00:00:00:09", "--bmc-driver", "redfish", "--bmc-address", "10.0.0.9"}, "pool"},
	} {
		e := testkit.Fails(t, tc.config, tc.args...)
		if e.Code != "NOT_FOUND" || e.Details.Path != tc.path || !nextStep.MatchString(e.Message) {
			t.Errorf("%v: %+v, want NOT_FOUND at %s naming the command to run", tc.args, e, tc.path)
		}
	}
}

// TestConflictSaysWhatToRun: making what exists already (a tenant, a site, a pool, an
// image signer) is CONFLICT at the name, and says what to do instead: the command that
// changes the one there is, or to pick another name. Before, each said only that it
// existed already.
func TestConflictSaysWhatToRun(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	key := filepath.Join(t.TempDir(), "signer.pem")
	writeFile(t, key, "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAjBucCnxErD6OEjEC4WQVUvG5amSZwIpPO3LqEGwXa+M=\n-----END PUBLIC KEY-----\n")
	for _, args := range [][]string{
		{"tenants", "create", "acme"},
		{"sites", "create", "rack-a"},
		{"pools", "create", "gpu", "--site", "rack-a"},
	} {
		testkit.JSON(t, admin, nil, args...)
		e := testkit.Fails(t, admin, args...)
		if e.Code != "CONFLICT" || e.Details.Path != "name" || !nextStep.MatchString(e.Message) {
			t.Errorf("%v again: %+v, want CONFLICT at name naming the command to run", args, e)
		}
	}
	add := []string{"signers", "add", "--data-dir", reg.DataDir, "--tenant", "root", "--id", "k1", "--public-key", key}
	testkit.JSON(t, "", nil, add...)
	if e := testkit.Fails(t, "", add...); e.Code != "CONFLICT" || e.Details.Path != "id" || !nextStep.MatchString(e.Message) {
		t.Errorf("signers add again: %+v, want CONFLICT at id naming the command to run", e)
	}
}
