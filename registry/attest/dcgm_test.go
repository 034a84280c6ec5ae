package attest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/hardware/dcgm"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
)

var dcgmCmd = proto.Command{ID: "wf_1:acceptance.0:a1", Kind: proto.CommandDiagDCGM, Payload: json.RawMessage(`{"level":2}`)}

// dcgmRun is a level 2 run on two GPUs, GPU 1 failing the memory test when failing.
func dcgmRun(failing bool) proto.DCGMResult {
	gpu1 := proto.DCGMPass
	if failing {
		gpu1 = proto.DCGMFail
	}
	return proto.DCGMResult{Level: 2, DCGMVersion: "4.2.3", GPUs: 2, Passed: true, Tests: []proto.DCGMTest{
		{Category: "Deployment", Name: "software", Status: proto.DCGMPass, Results: []proto.DCGMEntityResult{{Entity: "GPU", ID: 0, Status: proto.DCGMPass}, {Entity: "GPU", ID: 1, Status: proto.DCGMPass}}},
		// The test's own status says pass: the registry reads each GPU's.
		{Category: "Hardware", Name: "memory", Status: proto.DCGMPass, Results: []proto.DCGMEntityResult{{Entity: "GPU", ID: 0, Status: proto.DCGMPass}, {Entity: "GPU", ID: 1, Status: gpu1}}},
	}}
}

// signDCGM is what an agent answers to dcgmCmd: r signed by a's key.
func signDCGM(t testing.TB, a agentKey, node, commandID string, r proto.DCGMResult) json.RawMessage {
	t.Helper()
	body, _ := json.Marshal(r)
	sr, err := proto.SignResult(a.key, proto.ResultPayload{NodeID: node, CommandID: commandID, Kind: proto.CommandDiagDCGM, Result: body})
	if err != nil {
		t.Fatal(err)
	}
	sr.Certificate = a.cert.Raw
	raw, _ := json.Marshal(sr)
	return raw
}

func TestDCGMPassed(t *testing.T) {
	ca, _ := testkit.NewCA()
	a := newAgent(t, ca, "node-1", "node")
	res := attest.Verifier{AgentCAs: ca.Pool()}.Received("node-1", proto.RoleNode, a.cert, dcgmCmd, time.Time{},
		proto.Result{ID: dcgmCmd.ID, Result: signDCGM(t, a, "node-1", dcgmCmd.ID, dcgmRun(false))})
	if res.Error != nil {
		t.Fatal(res.Error)
	}
	var stored attest.DCGM
	if err := json.Unmarshal(res.Result, &stored); err != nil {
		t.Fatal(err)
	}
	if !stored.Passed || len(stored.Tests) != 2 || stored.Attestation == nil || len(stored.Attestation.Certificate) == 0 {
		t.Errorf("stored %s", res.Result)
	}
}

// TestDCGMRefusals: the step fails with DRIVER_ERROR unless the result is signed by this
// machine for this step, no test failed on any GPU and a test passed on each of the
// machine's GPUs. Before, a run whose every test was skipped, and a run on 2 GPUs of a
// machine of 3, passed.
func TestDCGMRefusals(t *testing.T) {
	ca, _ := testkit.NewCA()
	v := attest.Verifier{AgentCAs: ca.Pool()}
	a := newAgent(t, ca, "node-1", "node")
	node2 := newAgent(t, ca, "node-2", "node")

	var sr proto.SignedResult
	json.Unmarshal(signDCGM(t, a, "node-1", dcgmCmd.ID, dcgmRun(true)), &sr)
	sr.Payload = []byte(strings.Replace(string(sr.Payload), `"status":"fail"`, `"status":"pass"`, 1))
	tampered, _ := json.Marshal(sr)
	unsigned, _ := json.Marshal(dcgmRun(false))
	level1 := dcgmRun(false)
	level1.Level = 1
	skipped := dcgmRun(false)
	for i, tc := range skipped.Tests {
		skipped.Tests[i].Status = proto.DCGMSkip
		for j := range tc.Results {
			tc.Results[j].Status = proto.DCGMSkip
		}
	}
	threeGPUs := dcgmRun(false) // the machine has 3 GPUs on PCI, DCGM saw 2
	threeGPUs.GPUs = 3
	tooMany := dcgmRun(false)
	tooMany.GPUs = 1 << 40

	cases := []struct {
		name, reason, says string
		raw                json.RawMessage
	}{
		{"a failed GPU", "tests-failed", "1 of 2 tests failed: memory (GPU 1)", signDCGM(t, a, "node-1", dcgmCmd.ID, dcgmRun(true))},
		{"the failure tampered into a pass", "signature", "does not verify", tampered},
		{"unsigned", "signature", "not signed", unsigned},
		{"signed by another node", "signature", "node-2", signDCGM(t, node2, "node-2", dcgmCmd.ID, dcgmRun(false))},
		{"replayed from another step", "signature", "another step", signDCGM(t, a, "node-1", "wf_0:acceptance.0:a1", dcgmRun(false))},
		{"a lower level than asked", "level", "level 1, not 2", signDCGM(t, a, "node-1", dcgmCmd.ID, level1)},
		{"no test", "tests-failed", "no test", signDCGM(t, a, "node-1", dcgmCmd.ID, proto.DCGMResult{Level: 2, Passed: true})},
		{"every test skipped", "tests-failed", "no test passed on GPU 0, 1 of the machine's 2", signDCGM(t, a, "node-1", dcgmCmd.ID, skipped)},
		{"a GPU DCGM did not see", "tests-failed", "no test passed on GPU 2 of the machine's 3", signDCGM(t, a, "node-1", dcgmCmd.ID, threeGPUs)},
		{"more GPUs than DCGM handles", "result", "1099511627776 GPUs", signDCGM(t, a, "node-1", dcgmCmd.ID, tooMany)},
	}
	for _, c := range cases {
		res := v.Received("node-1", proto.RoleNode, a.cert, dcgmCmd, time.Time{}, proto.Result{ID: dcgmCmd.ID, Result: c.raw})
		if res.Error == nil || res.Error.Code != proto.DriverError || res.Error.Details.Reason != c.reason || !strings.Contains(res.Error.Message, c.says) {
			t.Errorf("%s: stored %s %+v; want DRIVER_ERROR %s saying %q", c.name, res.Result, res.Error, c.reason, c.says)
		}
	}
	res := v.Received("node-1", proto.RoleNode, a.cert, dcgmCmd, time.Time{}, proto.Result{ID: dcgmCmd.ID, Result: cases[0].raw})
	if diff := cmp.Diff([]proto.Failure{{Name: "memory", GPUs: []int{1}}}, res.Error.Details.Failed); diff != "" {
		t.Errorf("details.failed (-want +got):\n%s", diff)
	}
}

// FuzzReceivedDCGM feeds the registry's reading of a diag.dcgm result whatever an agent
// may answer: it never panics, and never lets the step succeed on an answer no key the
// agent CA certified for node-1 signed; every refusal is DRIVER_ERROR.
func FuzzReceivedDCGM(f *testing.F) {
	ca, err := testkit.NewCA()
	if err != nil {
		f.Fatal(err)
	}
	a := newAgent(f, ca, "node-1", "node")
	stranger, _ := testkit.NewCA()
	o := newAgent(f, stranger, "node-1", "node")
	f.Add([]byte(`{"passed":true,"level":2,"tests":[{"name":"x","status":"pass","results":[]}]}`))
	f.Add([]byte(`{"payload":"e30=","algorithm":"ecdsa-p256-sha256","signature":""}`))
	f.Add([]byte(signDCGM(f, o, "node-1", dcgmCmd.ID, dcgmRun(false))))
	v := attest.Verifier{AgentCAs: ca.Pool()}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		res := v.Received("node-1", proto.RoleNode, a.cert, dcgmCmd, time.Time{}, proto.Result{ID: dcgmCmd.ID, Result: raw})
		if res.Error == nil {
			t.Fatalf("passed an answer no agent key of node-1 signed: %s", raw)
		}
		if res.Error.Code != proto.DriverError {
			t.Fatalf("refused with %v", res.Error)
		}
	})
}

// recordedRun is dcgmi's recorded output file of hardware/dcgm/testdata, with the
// categories more appended to its test_categories, as the agent parses it on a machine
// of gpus GPUs and answers a level's run.
func recordedRun(t *testing.T, file string, gpus, level int, more ...any) proto.DCGMResult {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "hardware", "dcgm", "testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	if len(more) > 0 {
		var doc map[string]map[string]any
		if err := json.Unmarshal(raw[bytes.IndexByte(raw, '{'):], &doc); err != nil {
			t.Fatal(err)
		}
		body := doc["DCGM GPU Diagnostic"]
		body["test_categories"] = append(body["test_categories"].([]any), more...)
		raw, _ = json.Marshal(doc)
	}
	r, err := dcgm.Parse(raw, gpus)
	if err != nil {
		t.Fatal(err)
	}
	r.Level, r.GPUs = level, gpus
	return r
}

// skippedCategory is a DCGM 3 category whose tests each skipped GPUs 0 to 7, as a
// level 3 run whose host engine could not run them answers (NVIDIA/DCGM issue 139,
// "dcgmi diag multiple tests skipped": every test of Integration, Hardware and Stress
// "Skip", the Deployment checks passed).
func skippedCategory(name string, tests ...string) map[string]any {
	var ts []any
	for _, test := range tests {
		ts = append(ts, map[string]any{"name": test, "results": []any{map[string]any{"gpu_ids": "0,1,2,3,4,5,6,7", "status": "SKIPPED"}}})
	}
	return map[string]any{"category": name, "tests": ts}
}

// TestDCGMHardwareSkipped: at level 2 and above, a GPU passes only when a test that runs
// it passed on it, not the deployment checks alone, which DCGM reports on every GPU
// without running any. The outputs are DCGM's recorded ones (hardware/dcgm/testdata):
// DCGM 3.1's deployment checks on 8 GPUs, alone or beside the tests of level 3 all
// skipped, and DCGM 4's diagnostic on 8 GPUs. Before, the 8 GPUs none of whose hardware
// tests ran passed acceptance at level 2 and 3.
func TestDCGMHardwareSkipped(t *testing.T) {
	ca, _ := testkit.NewCA()
	v := attest.Verifier{AgentCAs: ca.Pool()}
	a := newAgent(t, ca, "node-1", "node")
	judge := func(level int, r proto.DCGMResult) proto.Result {
		cmd := proto.Command{ID: dcgmCmd.ID, Kind: proto.CommandDiagDCGM, Payload: json.RawMessage(fmt.Sprintf(`{"level":%d}`, level))}
		return v.Received("node-1", proto.RoleNode, a.cert, cmd, time.Time{}, proto.Result{ID: cmd.ID, Result: signDCGM(t, a, "node-1", cmd.ID, r)})
	}
	skipped := []any{
		skippedCategory("Integration", "PCIe"),
		skippedCategory("Hardware", "GPU Memory", "Diagnostic"),
		skippedCategory("Stress", "Targeted Stress", "Targeted Power", "Memory Bandwidth"),
	}
	refused := []struct {
		name  string
		level int
		r     proto.DCGMResult
	}{
		{"level 3, every hardware test skipped", 3, recordedRun(t, "dcgm3-pass.json", 8, 3, skipped...)},
		{"level 2, the deployment checks alone", 2, recordedRun(t, "dcgm3-pass.json", 8, 2)},
	}
	for _, c := range refused {
		res := judge(c.level, c.r)
		if res.Error == nil || res.Error.Code != proto.DriverError || res.Error.Details.Reason != proto.ReasonTestsFailed ||
			!strings.Contains(res.Error.Message, "no hardware test passed on GPU 0, 1, 2, 3, 4, 5, 6, 7 of the machine's 8") {
			t.Errorf("%s: refused with %+v (nil: passed); want DRIVER_ERROR tests-failed naming GPUs 0 to 7", c.name, res.Error)
		}
	}
	passed := []struct {
		name  string
		level int
		r     proto.DCGMResult
	}{
		{"level 1, the deployment checks", 1, recordedRun(t, "dcgm3-pass.json", 8, 1)},
		{"level 4, DCGM 4's diagnostic on every GPU", 4, recordedRun(t, "dcgm4-pass.json", 8, 4)},
	}
	for _, c := range passed {
		if res := judge(c.level, c.r); res.Error != nil {
			t.Errorf("%s: refused %+v", c.name, res.Error)
		}
	}
}
