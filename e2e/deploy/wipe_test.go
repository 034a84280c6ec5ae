package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/testkit"
)

// wipeProfile boots the ramdisk and wipes its disk in each mode.
const wipeProfile = `{"id": "wipe-test", "version": 1, "target": "metal", "role": "host",
  "steps": [
    {"use": "boot.prepareRamdisk", "on": "site"},
    {"use": "management.setBootDevice", "on": "site", "with": {"device": "pxe"}},
    {"use": "power.setPower", "on": "site", "with": {"action": "cycle"}},
    {"use": "wait.agentJoined", "with": {"role": "ramdisk"}, "timeout": "1m"},
    {"use": "disk.wipe", "on": "ramdisk", "with": {"mode": "quick"}, "timeout": "1m"},
    {"use": "disk.wipe", "on": "ramdisk", "with": {"mode": "secure-erase"}, "timeout": "1m"}],
  "cleanup": [{"use": "boot.cleanUp", "on": "site"}]}`

// TestWipeAttestation runs disk.wipe through the real registry, site and bcd ramdisk:
// the quick wipe of the machine's disk is attested by the registry, the secure erase its
// disk (a file) cannot do is reported unwiped and not attested, `nodes get` shows the
// last wipe, and `workflows attestation` writes files the openssl command line verifies
// against the registry's agent CA, and refuses once a byte of the payload changes.
func TestWipeAttestation(t *testing.T) {
	w := newWorld(t)
	testkit.JSON(t, w.admin, nil, "profiles", "create", writeFile(t, wipeProfile))
	const uuid = "4c4c4544-0042-3510-8052-b4c04f5959a1"
	m := newMachine(t, uuid, 8<<20)
	if err := os.WriteFile(m.disk, bytes.Repeat([]byte("old data"), 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	id := w.enroll(t, "52:54:00:12:36:01", uuid, m)
	res := testkit.CLI(t, w.admin, "nodes", "deploy", id, "--profile", "wipe-test", "--wait")
	if res.Code != 0 {
		console, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
		t.Fatalf("deploy: exit %d\n%s\n%s\nconsole:\n%s", res.Code, res.Stdout, res.Stderr, console)
	}
	disk, _ := os.ReadFile(m.disk)
	if !bytes.Equal(disk[:1<<20], make([]byte, 1<<20)) || !bytes.Equal(disk[len(disk)-1<<20:], make([]byte, 1<<20)) {
		t.Errorf("the quick wipe left data in the first or last MiB")
	}

	var node api.NodeView
	testkit.JSON(t, w.admin, &node, "nodes", "get", id)
	var run api.WorkflowView
	testkit.JSON(t, w.admin, &run, "workflows", "get", node.Workflow)
	var quick, secure attest.Wipe
	if err := json.Unmarshal(run.Steps[4].Result, &quick); err != nil || !quick.Attested || len(quick.Disks) != 1 || quick.Disks[0].Method != proto.WipeMethodSignatures {
		t.Fatalf("quick wipe stored %+v (%v)", quick, err)
	}
	if err := json.Unmarshal(run.Steps[5].Result, &secure); err != nil || secure.Attested || secure.Disks[0].Wiped || !strings.Contains(secure.Reason, "not wiped") {
		t.Fatalf("secure erase of a file stored %+v (%v)", secure, err)
	}
	if node.Wipe == nil || node.Wipe.Attested || node.Wipe.Step != "steps[5]" || node.Wipe.Mode != proto.WipeSecureErase {
		t.Errorf("nodes get shows the last wipe %+v", node.Wipe)
	}
	if out := testkit.CLI(t, w.admin, "workflows", "get", node.Workflow); !strings.Contains(out.Stdout, "not attested: disk disk was not wiped") ||
		strings.Count(out.Stdout, " attested") != 2 {
		t.Errorf("workflows get:\n%s", out.Stdout)
	}
	if out := testkit.CLI(t, w.admin, "nodes", "get", id); !strings.Contains(out.Stdout, "last disk wipe (secure-erase, steps[5] of workflow "+node.Workflow+"): NOT attested: disk disk was not wiped") {
		t.Errorf("nodes get:\n%s", out.Stdout)
	}

	dir := t.TempDir()
	out := testkit.CLI(t, w.admin, "workflows", "attestation", node.Workflow, "--step", "4", "--out", dir)
	if out.Code != 0 || !strings.Contains(out.Stdout, "openssl dgst -sha256 -verify") {
		t.Fatalf("workflows attestation: exit %d\n%s\n%s", out.Code, out.Stdout, out.Stderr)
	}
	openssl := func(args ...string) error {
		cmd := exec.Command("openssl", args...)
		cmd.Dir = dir
		b, err := cmd.CombinedOutput()
		if err != nil {
			return &exec.ExitError{ProcessState: cmd.ProcessState, Stderr: b}
		}
		return nil
	}
	caFile := filepath.Join(w.reg.DataDir, "pki", "agent-ca.crt")
	var signed proto.ResultPayload
	if err := json.Unmarshal(quick.Attestation.Payload, &signed); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"x509", "-in", "certificate.pem", "-pubkey", "-noout", "-out", "agent-pub.pem"},
		{"dgst", "-sha256", "-verify", "agent-pub.pem", "-signature", "signature", "message"},
		{"verify", "-CAfile", caFile, "-attime", fmt.Sprint(signed.Time.Unix()), "certificate.pem"},
	} {
		if err := openssl(args...); err != nil {
			t.Fatalf("openssl %s: %v %s", strings.Join(args, " "), err, err.(*exec.ExitError).Stderr)
		}
	}
	// The message is the domain and the payload as the docs say to build it.
	payload, _ := os.ReadFile(filepath.Join(dir, "payload.json"))
	message, _ := os.ReadFile(filepath.Join(dir, "message"))
	if string(message) != "bc-result-v1\n"+string(payload) || !strings.Contains(string(payload), `"commandId":"`+node.Workflow+`:main.4:a1"`) {
		t.Errorf("message %q", message)
	}
	// An auditor's check fails on a payload changed by one byte.
	os.WriteFile(filepath.Join(dir, "message"), bytes.Replace(message, []byte(`"wiped":true`), []byte(`"wiped":tru3`), 1), 0o644)
	if err := openssl("dgst", "-sha256", "-verify", "agent-pub.pem", "-signature", "signature", "message"); err == nil {
		t.Errorf("openssl verified a tampered payload")
	}
	// A step without a signed result has nothing to print.
	if e := testkit.Fails(t, w.admin, "workflows", "attestation", node.Workflow, "--step", "3", "--out", dir); e.Code != "NOT_FOUND" {
		t.Errorf("a step without a signed result: %+v", e)
	}
}
