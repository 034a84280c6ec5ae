package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// TestLifecycleEndToEnd walks one machine through its lifecycle with the real registry,
// the site, bcd ramdisk and the installed OS's bcd join and bcd node: enroll ->
// (enrolling) -> ready -> inspect -> commission -> ready -> deploy -> active -> rescue
// -> (the installed OS boots again) active -> remediate (a restart) -> active -> release
// -> ready -> retire -> retired, each state seen through the CLI; the disk is read back
// after the wipes, and the installed OS's agent of the retired node is refused.
func TestLifecycleEndToEnd(t *testing.T) {
	w, raw := hostWorld(t)
	const uuid = "4c4c4544-0042-3510-8052-b4c04f5958b1"
	m := newMachine(t, uuid, int64(len(raw)))

	var n store.Node
	testkit.JSON(t, w.admin, &n, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:12:38:01", "--product-uuid", uuid,
		"--bmc-driver", "qmp", "--bmc-address", "unix:///run/qmp.sock")
	if n.State != store.NodeEnrolling || n.Transition != "enroll" || n.Workflow == "" {
		t.Fatalf("enrolled as %s (%s, workflow %q)", n.State, n.Transition, n.Workflow)
	}
	id := n.ID
	w.site.add(id, m)
	waitState(t, w.admin, id, store.NodeReady)
	if e := testkit.Fails(t, w.admin, "nodes", "release", id); e.Code != "INVALID_STATE" || e.Details.Reason != store.NodeReady {
		t.Errorf("releasing a ready node: %+v", e)
	}

	walk := []struct {
		args    []string
		during  string
		after   string
		profile string
		lines   []string
	}{
		{[]string{"inspect"}, store.NodeInspecting, store.NodeReady, "metal-inspect@2",
			[]string{"metal.ensureRamdisk control-plane succeeded", "inventory.refresh ramdisk succeeded"}},
		{[]string{"commission"}, store.NodeCommissioning, store.NodeReady, "metal-commission@1",
			[]string{"diag.dcgm ramdisk skipped (the machine reports no GPU", "disk.wipe ramdisk succeeded"}},
		{[]string{"deploy", "--profile", "e2e-host"}, "", store.NodeActive, "e2e-host@1", []string{"boot.kexec ramdisk succeeded"}},
		{[]string{"rescue"}, store.NodeRescue, store.NodeRescue, "metal-rescue@1", []string{"metal.ensureRamdisk control-plane succeeded"}},
		{[]string{"unrescue"}, store.NodeRescue, store.NodeActive, "metal-unrescue@1", []string{"wait.agentJoined control-plane succeeded"}},
		{[]string{"remediate", "--profile", "remediate-reboot", "--reason", "checking the walk"}, store.NodeRemediating, store.NodeActive, "remediate-reboot@1",
			[]string{"power.setPower site succeeded", "wait.generationObserved control-plane succeeded"}},
		{[]string{"release", "--wipe", "quick"}, store.NodeReleasing, store.NodeReady, "metal-release@1",
			[]string{"metal.ensureRamdisk control-plane succeeded", "disk.wipe ramdisk succeeded"}},
		{[]string{"retire"}, store.NodeRetiring, store.NodeRetired, "metal-retire@1", []string{"metal.revokeIdentity control-plane succeeded"}},
	}
	for _, s := range walk {
		args := append([]string{"nodes", s.args[0], id}, s.args[1:]...)
		res := testkit.CLI(t, w.admin, append(args, "--wait")...)
		console, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
		if res.Code != 0 || !strings.Contains(res.Stdout, "succeeded; node "+id+" is "+s.after) {
			t.Fatalf("nodes %s: exit %d\n%s\n%s\nconsole:\n%s", s.args[0], res.Code, res.Stdout, res.Stderr, console)
		}
		if s.during != "" && !strings.Contains(res.Stdout, s.args[0]+": node "+id+" is "+s.during+", running "+s.profile) {
			t.Errorf("nodes %s --wait does not show the node %s:\n%s", s.args[0], s.during, res.Stdout)
		}
		for _, l := range s.lines {
			if !strings.Contains(strings.Join(strings.Fields(res.Stdout), " "), l) {
				t.Errorf("nodes %s --wait does not show %q:\n%s", s.args[0], l, res.Stdout)
			}
		}
		got := testkit.CLI(t, w.admin, "nodes", "get", id)
		if !strings.Contains(got.Stdout, "state "+s.after+"; last transition "+s.args[0]+", workflow wf_") {
			t.Errorf("nodes get after %s:\n%s", s.args[0], got.Stdout)
		}
		if s.args[0] == "remediate" && (!strings.Contains(got.Stdout, "last remediation remediate-reboot@1") || !strings.Contains(got.Stdout, ": checking the walk")) {
			t.Errorf("nodes get does not show the remediation and its reason:\n%s", got.Stdout)
		}
		var listed struct{ Nodes []store.Node }
		testkit.JSON(t, w.admin, &listed, "nodes", "list", "--state", s.after)
		if len(listed.Nodes) != 1 || listed.Nodes[0].ID != id {
			t.Errorf("nodes list --state %s: %+v", s.after, listed.Nodes)
		}
		disk, _ := os.ReadFile(m.disk)
		switch s.args[0] {
		case "deploy":
			if len(disk) != len(raw) || !bytes.Equal(disk[:1<<20], raw[:1<<20]) {
				t.Errorf("the disk does not hold the image after the deploy")
			}
		case "release":
			// The released machine's installed OS: its bcd node, started again with the
			// certificate its user could have kept, is refused as of an earlier
			// installation.
			refusedNode(t, m, "belongs to an earlier installation")
			fallthrough
		case "commission":
			// The quick wipe zeroes the first and last MiB: the partition table is gone.
			if !bytes.Equal(disk[:1<<20], make([]byte, 1<<20)) || !bytes.Equal(disk[len(disk)-1<<20:], make([]byte, 1<<20)) {
				t.Errorf("after nodes %s the disk's first or last MiB holds data", s.args[0])
			}
		}
	}

	// Retired: a crypto-erase of a disk that is a file cannot be done, so the retire
	// records its unverified wipe, and the identity is revoked. Nothing else is allowed.
	testkit.JSON(t, w.admin, &n, "nodes", "get", id)
	if n.IdentityRevokedAt.IsZero() || n.UnverifiedWipe == nil || n.UnverifiedWipe.Error.Code != "UNVERIFIED_WIPE" {
		t.Errorf("retired node: revoked %v, unverified wipe %+v", n.IdentityRevokedAt, n.UnverifiedWipe)
	}
	for _, verb := range []string{"inspect", "release", "retire", "rescue", "retry", "cancel"} {
		if e := testkit.Fails(t, w.admin, "nodes", verb, id); e.Code != "INVALID_STATE" || e.Details.Reason != store.NodeRetired {
			t.Errorf("nodes %s of a retired node: %+v", verb, e)
		}
	}
	if e := testkit.Fails(t, w.admin, "tokens", "create", "--kind", "provisioned", "--node-id", id, "--site", "rack-a"); e.Code != "FORBIDDEN" || e.Details.Reason != "identity-revoked" {
		t.Errorf("a join token for the retired node: %+v", e)
	}
	// The installed OS's bcd node, started again with its credentials, is refused.
	refusedNode(t, m, "was revoked")
}

// refusedNode starts the bcd node of m's installed OS again, with the configuration
// (and certificate) it kept, and checks that the registry refuses it for good, for the
// reason that contains why.
func refusedNode(t *testing.T, m *machine, why string) {
	t.Helper()
	confs, _ := filepath.Glob(filepath.Join(m.dir, "os-*", "etc-bcd"))
	if len(confs) == 0 {
		t.Fatal("the installed OS kept no bcd configuration")
	}
	logs, stop := runNode(t, confs[len(confs)-1])
	defer stop()
	if !waitFor(t, 30*time.Second, func() bool { return refusedForGood(logs, why) }) {
		t.Errorf("bcd node with the installed OS's kept certificate was not refused (%s):\n%s", why, logs.String())
	}
}

// runNode starts bcd node with the configuration directory conf, in a boot of its own,
// and returns its logs and what stops it.
func runNode(t *testing.T, conf string) (*netns.SyncBuffer, func()) {
	t.Helper()
	root := t.TempDir()
	if err := newBoot(root); err != nil {
		t.Fatal(err)
	}
	var logs netns.SyncBuffer
	node := exec.Command(testkit.Binary(t, "bcd"), "node", "--config-dir", conf, "--root", root)
	node.Stdout, node.Stderr = &logs, &logs
	node.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	return &logs, func() { syscall.Kill(-node.Process.Pid, syscall.SIGKILL); node.Wait() }
}

// refusedForGood reports whether bcd node logged that the registry refuses its
// certificate for good, saying why.
func refusedForGood(logs *netns.SyncBuffer, why string) bool {
	out := logs.String()
	return strings.Contains(out, "refuses this agent's certificate for good") && strings.Contains(out, why)
}

// TestReleaseSurvivesAKill kills the registry (SIGKILL) while a release's power-off is
// at the site, then starts it again: the release resumes, the site's answer to the
// power-off completes it (no second power-off), the cleanup runs once, and the node is
// ready.
func TestReleaseSurvivesAKill(t *testing.T) {
	w, raw := hostWorld(t)
	id, _ := w.readyMachine(t, "52:54:00:12:38:02", "4c4c4544-0042-3510-8052-b4c04f5958b2", len(raw))
	if res := testkit.CLI(t, w.admin, "nodes", "deploy", id, "--profile", "e2e-host", "--wait"); res.Code != 0 {
		t.Fatalf("deploy: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	holding, release := w.site.holdPowerOff()
	before := len(w.site.commands())
	var started struct{ WorkflowID string }
	testkit.JSON(t, w.admin, &started, "nodes", "release", id)
	select {
	case <-holding:
	case <-time.After(time.Minute):
		t.Fatalf("the release never powered the machine off; site commands %q", w.site.commands()[before:])
	}
	w.reg.Kill()
	release()
	w.reg = testkit.StartRegistry(t, w.reg.DataDir, w.serveArgs...)
	n := waitState(t, w.admin, id, store.NodeReady)
	if n.Workflow != started.WorkflowID {
		t.Errorf("the node's workflow is %s, want the release %s", n.Workflow, started.WorkflowID)
	}
	offs, cleanups := 0, 0
	for _, c := range w.site.commands()[before:] {
		switch c {
		case id + ` {"action":"off"}`:
			offs++
		case id + " ":
			cleanups++
		}
	}
	if offs != 1 || cleanups != 1 {
		t.Errorf("%d power-offs and %d cleanups reached the site, want 1 and 1: %q", offs, cleanups, w.site.commands()[before:])
	}
}
