package cli_test

import (
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// TestMeasuredBootThroughTheCLI: a pool's measured-boot policy is checked with the path
// of what is wrong; a node's attestation is shown to its tenant and accepted only by a
// credential that manages its nodes, naming the boot it accepts by its digest (a usage error
// without --boot, INVALID_INPUT at boot for what is no digest); another tenant learns nothing of it (NOT_FOUND), and a node
// without a verified boot has nothing to accept.
func TestMeasuredBootThroughTheCLI(t *testing.T) {
	reg, configs := acmeBetaAndReader(t)
	admin := reg.AdminConfig
	if e := testkit.Fails(t, admin, "pools", "update", "gpu", "--tenant", "acme",
		"--policy", writeDoc(t, `{"measuredBoot": {"mode": "golden", "pcrs": [4], "golden": {"4": "00"}}}`)); e.Code != "INVALID_INPUT" || e.Details.Path != "policy.measuredBoot.golden.4" {
		t.Errorf("a golden value that is not a SHA-256: %+v", e)
	}
	var pool store.Pool
	testkit.JSON(t, admin, &pool, "pools", "update", "gpu", "--tenant", "acme", "--policy", writeDoc(t, `{"measuredBoot": {"mode": "tofu"}}`))
	if pool.Policy.MeasuredBoot == nil || pool.Policy.MeasuredBoot.Mode != "tofu" {
		t.Fatalf("pool %+v", pool.Policy)
	}
	var node store.Node
	testkit.JSON(t, configs["acme"], &node, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")

	if res := testkit.CLI(t, configs["acme-reader"], "nodes", "attestation", node.ID); res.Code != 0 || !strings.Contains(res.Stdout, "no TPM enrolled") {
		t.Errorf("nodes attestation of a node never attested: exit %d %s%s", res.Code, res.Stdout, res.Stderr)
	}
	boot := "sha256:" + strings.Repeat("0", 64)
	if e := testkit.UsageFails(t, configs["acme"], "nodes", "attest", "accept", node.ID); e.Details.Path != "--boot" {
		t.Errorf("accepting without --boot: %+v, want a usage error at --boot", e)
	}
	for _, args := range [][]string{{"--boot", "0000"}, {"--boot", strings.ToUpper(boot)}} {
		if e := testkit.Fails(t, configs["acme"], append([]string{"nodes", "attest", "accept", node.ID}, args...)...); e.Code != "INVALID_INPUT" || e.Details.Path != "boot" {
			t.Errorf("accepting with %q: %+v, want INVALID_INPUT at boot", args, e)
		}
	}
	if e := testkit.Fails(t, configs["acme"], "nodes", "attest", "accept", node.ID, "--boot", boot); e.Code != "INVALID_STATE" || !strings.Contains(e.Message, "no verified boot") {
		t.Errorf("accepting a node without a verified boot: %+v", e)
	}
	if e := testkit.Fails(t, configs["acme-reader"], "nodes", "attest", "accept", node.ID, "--boot", boot); e.Code != "FORBIDDEN" {
		t.Errorf("a read-only credential accepting a baseline: %+v, want FORBIDDEN", e)
	}
	for _, args := range [][]string{{"attestation", node.ID}, {"attest", "accept", node.ID, "--boot", boot}} {
		if e := testkit.Fails(t, configs["beta"], append([]string{"nodes"}, args...)...); e.Code != "NOT_FOUND" || e.Details.Path != "nodeId" {
			t.Errorf("beta: nodes %s of acme's node: %+v, want NOT_FOUND", strings.Join(args, " "), e)
		}
	}
}
