package metal

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/better-compute/better-compute/hardware/tpm"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit/tpmboot"
)

// tpmMachine is the harness machine's TPM: a software TPM its ramdisk answers tpm.enroll,
// tpm.activate and tpm.quote with, as bcd ramdisk does (hardware/tpm).
type tpmMachine struct {
	sw  *tpmboot.SWTPM
	tpm *tpm.TPM
	// quoted holds each answer to tpm.quote.
	quoted []json.RawMessage
}

// answer decodes a command's input into I, runs do and encodes its result.
func answer[I, O any](do func(I) (O, error)) func(json.RawMessage) (json.RawMessage, error) {
	return func(raw json.RawMessage) (json.RawMessage, error) {
		var in I
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, err
		}
		out, err := do(in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}
}

// withTPM gives the harness machine a TPM that booted kernel, and sets the pool's
// measured-boot policy to mode.
func (h *harness) withTPM(kernel, mode string) *tpmMachine {
	h.t.Helper()
	tm := &tpmMachine{}
	tm.tpm, tm.sw = tpmboot.Machine(h.t, tpmboot.Boot(kernel), nil)
	h.machine.answers[proto.CommandTPMEnroll] = answer(func(struct{}) (proto.TPMEnrollResult, error) { return tm.tpm.Enroll() })
	h.machine.answers[proto.CommandTPMActivate] = answer(func(in proto.TPMActivate) (proto.TPMActivateResult, error) { return tm.tpm.Activate(in) })
	quote := answer(func(in proto.TPMQuote) (proto.TPMQuoteResult, error) { return tm.tpm.Quote(in) })
	h.machine.answers[proto.CommandTPMQuote] = func(in json.RawMessage) (json.RawMessage, error) {
		out, err := quote(in)
		tm.quoted = append(tm.quoted, out)
		return out, err
	}
	h.measuredBoot(&store.MeasuredBootPolicy{Mode: mode})
	return tm
}

func (h *harness) measuredBoot(p *store.MeasuredBootPolicy) {
	h.t.Helper()
	err := h.store.Update(func(tx *store.Tx) error {
		pool, err := tx.Pool("acme", "gpu")
		if err != nil {
			return err
		}
		pool.Policy.MeasuredBoot = p
		if err := h.svc.CheckPoolPolicy(pool.Policy); err != nil {
			return err
		}
		_, err = tx.SetPoolPolicy("acme", "gpu", pool.Policy)
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

// reboot boots the machine again with kernel.
func (tm *tpmMachine) reboot(t *testing.T, kernel string) {
	tm.tpm.Close()
	tm.tpm = tpmboot.Reboot(t, tm.sw, tpmboot.Boot(kernel), nil)
}

// deployOnce deploys deploy-only on the node (released first when active or failed) and returns
// the ended run's node.
func (h *harness) deployOnce(node string) store.Node {
	h.t.Helper()
	if s := h.node(node).State; s == store.NodeActive || s == store.NodeFailed {
		release, _, err := h.act(node, Release, Options{})
		if err != nil {
			h.t.Fatal(err)
		}
		h.end(release.ID)
	}
	h.machine.forget()
	run, err := h.deploy(node, "testdata/deploy-only.json")
	if err != nil {
		h.t.Fatal(err)
	}
	_, n := h.end(run.ID)
	return n
}

func (h *harness) nodeTPM(node string) store.NodeTPM {
	h.t.Helper()
	var rec store.NodeTPM
	if err := h.store.View(func(tx *store.Tx) (err error) { rec, _, err = tx.NodeTPM(node); return err }); err != nil {
		h.t.Fatal(err)
	}
	return rec
}

// Under tofu the first verified boot becomes the baseline, enrolled and quoted before
// deploy.image; the same boot again passes without enrolling again; a boot of another
// kernel is refused before deploy.image with the kernel's event named, until the
// operator accepts it.
func TestMeasuredBootTOFU(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	tm := h.withTPM("kernel 6.1", proto.MeasuredBootTOFU)

	n := h.deployOnce(node)
	want := []string{"ramdisk tpm.enroll", "ramdisk tpm.activate", "ramdisk tpm.quote", "ramdisk deploy.image"}
	if diff := cmp.Diff(want, h.machine.kinds()); diff != "" || n.State != store.NodeActive {
		t.Fatalf("first boot: node %s %+v, commands (-want +got):\n%s", n.State, n.Failure, diff)
	}
	rec := h.nodeTPM(node)
	if rec.Baseline == nil || rec.Last == nil || rec.Last.Verdict != proto.VerdictBaseline || len(rec.EKPublic) == 0 {
		t.Fatalf("after the first boot: %+v", rec)
	}

	tm.reboot(t, "kernel 6.1")
	n = h.deployOnce(node)
	if diff := cmp.Diff([]string{"ramdisk tpm.quote", "ramdisk deploy.image"}, h.machine.kinds()); diff != "" || n.State != store.NodeActive {
		t.Fatalf("second boot: node %s %+v, commands (-want +got):\n%s", n.State, n.Failure, diff)
	}
	if v := h.nodeTPM(node).Last.Verdict; v != proto.VerdictMatch {
		t.Fatalf("second boot's verdict %s", v)
	}

	tm.reboot(t, "kernel 6.2 with a rootkit")
	n = h.deployOnce(node)
	if n.State != store.NodeFailed || n.Failure == nil || n.Failure.Error.Code != proto.DriverError ||
		n.Failure.Error.Details.Reason != proto.ReasonMeasurementMismatch || !strings.Contains(n.Failure.Error.Message, `new event EV_EFI_BOOT_SERVICES_APPLICATION`) ||
		!strings.Contains(n.Failure.Error.Message, `image \vmlinuz`) || !strings.Contains(n.Failure.Error.Message, "nodes attest accept "+node+" --boot "+BootDigest(h.nodeTPM(node).Last.Boot)) {
		t.Fatalf("another kernel: node %s, failure %+v", n.State, n.Failure)
	}
	if sent := h.machine.received(proto.CommandDeployImage); len(sent) != 0 {
		t.Fatalf("deploy.image was sent to a machine whose boot differs: %+v", sent)
	}
	if v := h.nodeTPM(node).Last.Verdict; v != proto.VerdictMismatch {
		t.Fatalf("refused boot's verdict %s", v)
	}

	if err := h.acceptBoot(node, BootDigest(h.nodeTPM(node).Last.Boot)); err != nil {
		t.Fatal(err)
	}
	if n = h.deployOnce(node); n.State != store.NodeActive {
		t.Fatalf("after accepting the new boot: node %s %+v", n.State, n.Failure)
	}
}

// tofuBaseline enrolls a node whose machine has a TPM under tofu and deploys it once, its
// boot of kernel 6.1 becoming the baseline.
func (h *harness) tofuBaseline() (string, *tpmMachine) {
	h.t.Helper()
	node := h.enroll(nil)
	tm := h.withTPM("kernel 6.1", proto.MeasuredBootTOFU)
	if n := h.deployOnce(node); n.State != store.NodeActive {
		h.t.Fatalf("first boot: node %s %+v", n.State, n.Failure)
	}
	return node, tm
}

// acceptBoot accepts the node's boot of digest boot, as credential cred_ops.
func (h *harness) acceptBoot(node, boot string) error {
	return h.store.Update(func(tx *store.Tx) error { _, err := AcceptBoot(tx, node, boot, "cred_ops"); return err })
}

// An accept names the boot the operator looked at: after the operator read the digest of
// a refused boot, the machine boots another kernel and is verified; the accept of the
// boot looked at is refused INVALID_STATE (reason boot-changed) and the baseline is still
// the first boot's, so the unseen kernel is refused at the next deploy. The accept of the
// boot now shown makes it the baseline. A boot that is not a digest is INVALID_INPUT at
// boot; neither refusal changes the record.
func TestAcceptNamesTheBootLookedAt(t *testing.T) {
	h := newHarness(t)
	node, tm := h.tofuBaseline()
	tm.reboot(t, "kernel 6.2")
	if n := h.deployOnce(node); n.State != store.NodeFailed {
		t.Fatalf("kernel 6.2 under tofu: node %s, want failed", n.State)
	}
	lookedAt := BootDigest(h.nodeTPM(node).Last.Boot)

	tm.reboot(t, "kernel 6.2 with a rootkit")
	if n := h.deployOnce(node); n.State != store.NodeFailed {
		t.Fatalf("the rootkit's boot under tofu: node %s, want failed", n.State)
	}
	before := h.nodeTPM(node)
	current := BootDigest(before.Last.Boot)
	if current == lookedAt {
		t.Fatalf("two kernels' boots have one digest %s", current)
	}
	refused := map[string]struct {
		boot, reason string
		code         proto.Code
	}{
		"the boot looked at, booted over since": {lookedAt, proto.ReasonBootChanged, proto.InvalidState},
		"no boot named":                         {"", "", proto.InvalidInput},
		"a digest without its sha256:":          {strings.TrimPrefix(current, "sha256:"), "", proto.InvalidInput},
		"a digest in capitals":                  {strings.ToUpper(current), "", proto.InvalidInput},
		"a digest cut short":                    {current[:len(current)-2], "", proto.InvalidInput},
	}
	for name, tc := range refused {
		if err := h.acceptBoot(node, tc.boot); err == nil {
			t.Errorf("%s: accepted, want %s reason %q at boot", name, tc.code, tc.reason)
		} else if e := proto.AsError(err); e.Code != tc.code || e.Details.Reason != tc.reason || e.Details.Path != "boot" {
			t.Errorf("%s: %v, want %s reason %q at boot", name, err, tc.code, tc.reason)
		}
		if diff := cmp.Diff(before, h.nodeTPM(node)); diff != "" {
			t.Errorf("%s changed the record (-before +after):\n%s", name, diff)
		}
	}
	if err := h.acceptBoot(node, lookedAt); err == nil || !strings.Contains(err.Error(), "booted again since") || !strings.Contains(err.Error(), current) {
		t.Errorf("the refusal of the boot looked at does not say the node booted again since, and its last boot: %v", err)
	}
	if n := h.deployOnce(node); n.State != store.NodeFailed || n.Failure.Error.Details.Reason != proto.ReasonMeasurementMismatch {
		t.Fatalf("the unseen boot after a refused accept: node %s %+v, want failed with a mismatch", n.State, n.Failure)
	}

	current = BootDigest(h.nodeTPM(node).Last.Boot)
	if err := h.acceptBoot(node, current); err != nil {
		t.Fatalf("accepting the boot shown: %v", err)
	}
	if rec := h.nodeTPM(node); rec.Baseline == nil || rec.Baseline.AcceptedBy != "cred_ops" || !cmp.Equal(rec.Baseline.PCRs, rec.Last.Boot.PCRs) {
		t.Fatalf("after accepting the boot shown: baseline %+v, last boot %+v", rec.Baseline, rec.Last.Boot.PCRs)
	}
	if n := h.deployOnce(node); n.State != store.NodeActive {
		t.Fatalf("the accepted boot again: node %s %+v", n.State, n.Failure)
	}
}

// A machine that answers tpm.quote with an earlier answer (a quote over an old nonce) is
// refused before deploy.image.
func TestMeasuredBootReplayedQuote(t *testing.T) {
	h := newHarness(t)
	node, tm := h.tofuBaseline()
	old := tm.quoted[0]
	h.machine.answers[proto.CommandTPMQuote] = func(json.RawMessage) (json.RawMessage, error) { return old, nil }
	n := h.deployOnce(node)
	if n.State != store.NodeFailed || n.Failure.Error.Code != proto.DriverError || n.Failure.Error.Details.Reason != proto.ReasonQuote {
		t.Fatalf("replayed quote: node %s %+v", n.State, n.Failure)
	}
	if len(h.machine.received(proto.CommandDeployImage)) != 0 {
		t.Fatal("deploy.image was sent after a replayed quote")
	}
}

// A machine without a TPM fails a pool whose policy is not off with UNSUPPORTED, and
// gets no image; under off it is never asked.
func TestMeasuredBootWithoutTPM(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	h.machine.answers[proto.CommandTPMEnroll] = func(json.RawMessage) (json.RawMessage, error) {
		return nil, proto.Errorf(proto.Unsupported, "this machine has no TPM 2.0").WithReason(proto.ReasonNoTPM)
	}
	h.measuredBoot(&store.MeasuredBootPolicy{Mode: proto.MeasuredBootRecord})
	n := h.deployOnce(node)
	if n.State != store.NodeFailed || n.Failure.Error.Code != proto.Unsupported || n.Failure.Error.Details.Reason != proto.ReasonNoTPM ||
		len(h.machine.received(proto.CommandDeployImage)) != 0 {
		t.Fatalf("no TPM under record: node %s %+v", n.State, n.Failure)
	}
	h.measuredBoot(nil)
	if n := h.deployOnce(node); n.State != store.NodeActive || len(h.machine.received(proto.CommandTPMEnroll)) != 0 {
		t.Fatalf("no TPM under off: node %s %+v, %v", n.State, n.Failure, h.machine.kinds())
	}
}

// Golden values other than the boot's refuse it; the policy's own checks refuse what is
// not a policy, with the path.
func TestMeasuredBootGolden(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	h.withTPM("kernel 6.1", proto.MeasuredBootTOFU)
	golden := map[string]string{"4": strings.Repeat("ab", 32)}
	h.measuredBoot(&store.MeasuredBootPolicy{Mode: proto.MeasuredBootGolden, PCRs: []int{4}, Golden: golden})
	n := h.deployOnce(node)
	if n.State != store.NodeFailed || n.Failure.Error.Details.Reason != proto.ReasonMeasurementMismatch || !strings.Contains(n.Failure.Error.Message, "PCR 4 is ") {
		t.Fatalf("golden: node %s %+v", n.State, n.Failure)
	}
	golden["4"] = hex.EncodeToString(h.nodeTPM(node).Last.Boot.PCRs[0].Digest)
	h.measuredBoot(&store.MeasuredBootPolicy{Mode: proto.MeasuredBootGolden, PCRs: []int{4}, Golden: golden})
	if n := h.deployOnce(node); n.State != store.NodeActive || h.nodeTPM(node).Last.Verdict != proto.VerdictMatch {
		t.Fatalf("the boot's own values as golden: node %s %+v", n.State, n.Failure)
	}

	bad := map[string]struct {
		policy store.MeasuredBootPolicy
		path   string
	}{
		"an unknown mode":               {store.MeasuredBootPolicy{Mode: "strict"}, "policy.measuredBoot.mode"},
		"a PCR a TPM does not have":     {store.MeasuredBootPolicy{Mode: "tofu", PCRs: []int{0, 24}}, "policy.measuredBoot.pcrs[1]"},
		"golden values for tofu":        {store.MeasuredBootPolicy{Mode: "tofu", Golden: golden}, "policy.measuredBoot.golden"},
		"a golden value that is no hex": {store.MeasuredBootPolicy{Mode: "golden", PCRs: []int{4}, Golden: map[string]string{"4": "zz"}}, "policy.measuredBoot.golden.4"},
		"a golden value of a PCR not compared": {store.MeasuredBootPolicy{Mode: "golden", PCRs: []int{4},
			Golden: map[string]string{"4": golden["4"], "7": golden["4"]}}, "policy.measuredBoot.golden.7"},
		"a compared PCR without golden value": {store.MeasuredBootPolicy{Mode: "golden"}, "policy.measuredBoot.golden"},
		// "04" and "+4" are PCR 4 too: with "4" beside them, a boot would be compared with
		// whichever of the two values the policy's map yields first.
		"a PCR's golden value given twice": {store.MeasuredBootPolicy{Mode: "golden", PCRs: []int{4},
			Golden: map[string]string{"4": golden["4"], "04": strings.Repeat("ab", 32)}}, "policy.measuredBoot.golden.04"},
		"a PCR's index with a sign": {store.MeasuredBootPolicy{Mode: "golden", PCRs: []int{4},
			Golden: map[string]string{"4": golden["4"], "+4": strings.Repeat("ab", 32)}}, "policy.measuredBoot.golden.+4"},
	}
	for name, tc := range bad {
		err := h.svc.CheckPoolPolicy(store.PoolPolicy{HardwareProfile: "gpu-redfish", MeasuredBoot: &tc.policy})
		if err == nil {
			t.Errorf("%s: accepted, want INVALID_INPUT at %s", name, tc.path)
			continue
		}
		if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != tc.path {
			t.Errorf("%s: %v (path %q), want INVALID_INPUT at %s", name, err, e.Details.Path, tc.path)
		}
	}
}

// attest.boot is the attestation as a step of its own: skipped under policy off, its
// result the verdict and the verified boot otherwise; under record a boot that differs
// from the baseline is recorded as a mismatch and passes.
func TestAttestBootStep(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	doc := []byte(`{"id": "attest-only", "version": 1, "target": "metal", "steps": [{"use": "attest.boot"}]}`)
	run := func() store.RunStep {
		t.Helper()
		if s := h.node(node).State; s == store.NodeActive || s == store.NodeFailed {
			release, _, err := h.act(node, Release, Options{})
			if err != nil {
				t.Fatal(err)
			}
			h.end(release.ID)
		}
		r, err := h.deployRecord(node, func(tx *store.Tx) (store.ProfileRecord, error) {
			rec, ok, err := tx.Profile("acme", "attest-only", 1)
			if err != nil || ok {
				return rec, err
			}
			return tx.CreateProfile(store.ProfileRecord{Tenant: "acme", ID: "attest-only", Version: 1, Document: doc})
		})
		if err != nil {
			t.Fatal(err)
		}
		r, n := h.end(r.ID)
		if n.State != store.NodeActive {
			t.Fatalf("node %s %+v", n.State, n.Failure)
		}
		return r.Steps[0]
	}
	if s := run(); s.State != store.StepSkipped || !strings.Contains(s.Reason, "measured-boot policy is off") {
		t.Fatalf("under off: %s %q", s.State, s.Reason)
	}
	tm := h.withTPM("kernel 6.1", proto.MeasuredBootRecord)
	var res proto.AttestBootResult
	if s := run(); s.State != store.StepSucceeded || json.Unmarshal(s.Result, &res) != nil || res.Verdict != proto.VerdictRecorded || res.Mode != proto.MeasuredBootRecord || len(res.Boot.Events) == 0 {
		t.Fatalf("under record: %s %s", s.State, s.Result)
	}
	// Under record, a boot that differs from an accepted baseline is recorded, not refused.
	if err := h.acceptBoot(node, BootDigest(res.Boot)); err != nil {
		t.Fatal(err)
	}
	tm.reboot(t, "kernel 6.2")
	if s := run(); s.State != store.StepSucceeded || json.Unmarshal(s.Result, &res) != nil || res.Verdict != proto.VerdictMismatch || len(res.Mismatches) != 1 {
		t.Fatalf("another kernel under record: %s %s", s.State, s.Result)
	}
}

// TestMeasuredBootSurvivesRestarts crashes the registry before and after each command of
// a deploy under tofu whose attestation enrolls the TPM: after the restart the deploy
// ends active with the boot as the node's baseline, and no command runs twice. The
// resumed attempt relays the credential and the nonce it sent before and reads the
// answers by them; before, it made them anew, and an answer kept from before the crash
// failed the step: the activation with reason activation (another secret), the quote
// with reason quote (another nonce).
func TestMeasuredBootSurvivesRestarts(t *testing.T) {
	want := []string{"ramdisk tpm.enroll", "ramdisk tpm.activate", "ramdisk tpm.quote", "ramdisk deploy.image"}
	for at := 1; at <= len(want); at++ {
		for _, after := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s after=%t", want[at-1], after), func(t *testing.T) {
				h := newHarness(t)
				node := h.enroll(nil)
				h.withTPM("kernel 6.1", proto.MeasuredBootTOFU)
				h.machine.forget()
				// The at-th command of the deploy, counted from its first.
				h.machine.sent, h.machine.crashAt, h.machine.crashAfter, h.machine.crashed = 0, at, after, make(chan struct{})
				if _, err := h.deploy(node, "testdata/deploy-only.json"); err != nil {
					t.Fatal(err)
				}
				if n := h.settle(node); n.State != store.NodeActive {
					t.Fatalf("node %s, failure %+v", n.State, n.Failure)
				}
				if diff := cmp.Diff(want, h.machine.kinds()); diff != "" {
					t.Errorf("commands the machine ran (-want +got):\n%s", diff)
				}
				if rec := h.nodeTPM(node); rec.Last == nil || rec.Baseline == nil || len(rec.EKPublic) == 0 {
					t.Errorf("the node's TPM record: %+v", rec)
				}
			})
		}
	}
}

// TestOneTPMOneNode: a TPM enrolled for one node is refused to a second node, INVALID_STATE
// ek-enrolled, before anything is recorded for it or deploy.image is sent: the second
// node's ramdisk booted on the first node's machine (its boot entry read off the
// network) presents the first machine's TPM. The first node is named to its own tenant
// only. Before, the TPM was enrolled for each node that presented it, and the second
// node deployed, its boots attested by the first machine's TPM.
func TestOneTPMOneNode(t *testing.T) {
	h := newHarness(t)
	first := h.enroll(nil)
	h.withTPM("kernel 6.1", proto.MeasuredBootTOFU)
	if n := h.deployOnce(first); n.State != store.NodeActive {
		t.Fatalf("the first node: %s %+v", n.State, n.Failure)
	}
	ek := h.nodeTPM(first).EKPublic

	// enrollIn enrolls a machine of mac in tenant's pool gpu and waits for its enrollment.
	enrollIn := func(tenant, mac, bmc string) string {
		t.Helper()
		var n store.Node
		var run store.Run
		err := h.store.Update(func(tx *store.Tx) (err error) {
			n, run, err = h.svc.Enroll(tx, Enrollment{Tenant: tenant, Pool: "gpu", MACs: []string{mac},
				BMC: store.BMC{Driver: "redfish", Address: bmc, CredentialRef: "secret://bmc/n1"}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		h.svc.Start(run)
		for id := run.ID; ; id = n.Workflow {
			if _, n = h.end(id); n.Workflow == id {
				break
			}
		}
		return n.ID
	}
	// attestIn runs attest.boot on node of tenant and returns the node as it ended.
	attestIn := func(tenant, node string) store.Node {
		t.Helper()
		h.machine.forget()
		var run store.Run
		err := h.store.Update(func(tx *store.Tx) error {
			rec, ok, err := tx.Profile(tenant, "attest-only", 1)
			if err == nil && !ok {
				rec, err = tx.CreateProfile(store.ProfileRecord{Tenant: tenant, ID: "attest-only", Version: 1,
					Document: []byte(`{"id": "attest-only", "version": 1, "target": "metal", "steps": [{"use": "attest.boot"}]}`)})
			}
			if err != nil {
				return err
			}
			run, err = h.svc.Deploy(tx, tenant, node, rec)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		h.svc.Start(run)
		_, n := h.end(run.ID)
		return n
	}
	refused := func(who string, n store.Node, says, hides string) {
		t.Helper()
		if n.State != store.NodeFailed || n.Failure == nil || n.Failure.Error.Code != proto.InvalidState || n.Failure.Error.Details.Reason != proto.ReasonEKEnrolled ||
			!strings.Contains(n.Failure.Error.Message, says) || hides != "" && strings.Contains(n.Failure.Error.Message, hides) {
			t.Errorf("%s: node %s %+v; want failed INVALID_STATE ek-enrolled saying %q", who, n.State, n.Failure, says)
		}
		if rec := h.nodeTPM(n.ID); rec.Node != "" {
			t.Errorf("%s: a TPM was recorded for the node: %+v", who, rec)
		}
		if got := h.machine.received(proto.CommandDeployImage); len(got) != 0 {
			t.Errorf("%s: deploy.image was sent: %+v", who, got)
		}
	}

	second := enrollIn("acme", "52:54:00:00:00:02", "https://10.0.0.5")
	refused("another node of the tenant", h.deployOnce(second), "enrolled for node "+first+" already", "")

	err := h.store.Update(func(tx *store.Tx) error {
		if _, err := tx.CreateTenant("globex"); err != nil {
			return err
		}
		_, err := tx.CreatePool(store.Pool{Tenant: "globex", Name: "gpu", Site: "rack-a",
			Policy: store.PoolPolicy{HardwareProfile: "gpu-redfish", MeasuredBoot: &store.MeasuredBootPolicy{Mode: proto.MeasuredBootTOFU}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	stranger := enrollIn("globex", "52:54:00:00:00:03", "https://10.0.0.6")
	refused("a node of another tenant", attestIn("globex", stranger), "enrolled for a node of another tenant already", first)

	if n := h.deployOnce(first); n.State != store.NodeActive {
		t.Errorf("the first node after the refusals: %s %+v", n.State, n.Failure)
	}
	if got := h.nodeTPM(first).EKPublic; !slices.Equal(got, ek) {
		t.Error("the first node's EK changed")
	}
}
