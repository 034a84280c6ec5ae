package attest_test

import (
	"encoding/json"
	"strings"
	"testing"

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
	res := attest.Verifier{AgentCAs: ca.Pool()}.Received("node-1", proto.RoleNode, a.cert, dcgmCmd,
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
		res := v.Received("node-1", proto.RoleNode, a.cert, dcgmCmd, proto.Result{ID: dcgmCmd.ID, Result: c.raw})
		if res.Error == nil || res.Error.Code != proto.DriverError || res.Error.Details.Reason != c.reason || !strings.Contains(res.Error.Message, c.says) {
			t.Errorf("%s: stored %s %+v; want DRIVER_ERROR %s saying %q", c.name, res.Result, res.Error, c.reason, c.says)
		}
	}
	res := v.Received("node-1", proto.RoleNode, a.cert, dcgmCmd, proto.Result{ID: dcgmCmd.ID, Result: cases[0].raw})
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
		res := v.Received("node-1", proto.RoleNode, a.cert, dcgmCmd, proto.Result{ID: dcgmCmd.ID, Result: raw})
		if res.Error == nil {
			t.Fatalf("passed an answer no agent key of node-1 signed: %s", raw)
		}
		if res.Error.Code != proto.DriverError {
			t.Fatalf("refused with %v", res.Error)
		}
	})
}
