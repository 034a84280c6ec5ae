package attest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// DCGM is the result the registry stores for a diag.dcgm that passed: the signed
// result's tests and the signed result itself, with the certificate that verified it.
type DCGM struct {
	proto.DCGMResult
	Attestation *proto.SignedResult `json:"attestation"`
}

// readDCGM is the registry's verdict on a diag.dcgm result: DRIVER_ERROR unless the
// signature verifies, the result is of the level asked, no test failed on any GPU and
// a test passed on each of the machine's GPUs (proto.DCGMResult.Untested: a result of
// 7 GPUs on a machine of 8, or one whose every test skipped, proves no GPU sound), at
// level 2 and above a test beyond the deployment checks (hardwareUntested); the
// failing tests and their GPU indices are in the error's details.failed.
func readDCGM(cmd proto.Command, sr *proto.SignedResult, p *proto.ResultPayload, refused error) (json.RawMessage, error) {
	if refused != nil {
		return nil, proto.Errorf(proto.DriverError, "diag.dcgm: the result is not node-signed by this machine: %v", refused).WithReason(proto.ReasonSignature)
	}
	var r proto.DCGMResult
	if err := json.Unmarshal(p.Result, &r); err != nil {
		return nil, proto.Errorf(proto.DriverError, "diag.dcgm: the signed result is not a DCGM result: %v", err).WithReason(proto.ReasonResult)
	}
	var asked proto.DiagDCGM
	if len(cmd.Payload) > 0 {
		if err := json.Unmarshal(cmd.Payload, &asked); err != nil {
			return nil, proto.Errorf(proto.Internal, "diag.dcgm input: %v", err)
		}
	}
	if asked.Level == 0 {
		asked.Level = 1
	}
	switch {
	case r.Level != asked.Level:
		return nil, proto.Errorf(proto.DriverError, "diag.dcgm: the machine ran level %d, not %d", r.Level, asked.Level).WithReason(proto.ReasonLevel)
	case len(r.Tests) == 0:
		return nil, proto.Errorf(proto.DriverError, "diag.dcgm: the machine reported no test").WithReason(proto.ReasonTestsFailed)
	case r.GPUs < 0 || r.GPUs > proto.DCGMMaxGPUs:
		return nil, proto.Errorf(proto.DriverError, "diag.dcgm: the result says the machine has %d GPUs, and DCGM handles at most %d", r.GPUs, proto.DCGMMaxGPUs).WithReason(proto.ReasonResult)
	}
	if failed := r.Failures(); len(failed) > 0 {
		var names []string
		for _, f := range failed {
			if len(f.GPUs) == 0 {
				names = append(names, f.Name)
				continue
			}
			names = append(names, fmt.Sprintf("%s (GPU %s)", f.Name, joinInts(f.GPUs)))
		}
		return nil, proto.Errorf(proto.DriverError, "diag.dcgm level %d: %d of %d tests failed: %s", r.Level, len(failed), len(r.Tests), strings.Join(names, "; ")).
			WithReason(proto.ReasonTestsFailed).WithFailed(failed)
	}
	if untested := r.Untested(); len(untested) > 0 {
		return nil, proto.Errorf(proto.DriverError, "diag.dcgm level %d: no test passed on GPU %s of the machine's %d: DCGM did not see it, or skipped every test on it",
			r.Level, joinInts(untested), max(r.GPUs, 1)).WithReason(proto.ReasonTestsFailed)
	}
	if unexercised := hardwareUntested(r); len(unexercised) > 0 {
		return nil, proto.Errorf(proto.DriverError, "diag.dcgm level %d: no hardware test passed on GPU %s of the machine's %d: only the deployment checks did, and they read the driver's state without running the GPU; DCGM skipped every test of level 2 and above on it",
			r.Level, joinInts(unexercised), max(r.GPUs, 1)).WithReason(proto.ReasonTestsFailed)
	}
	r.Passed = true
	return proto.Marshal(DCGM{DCGMResult: r, Attestation: sr})
}

// hardwareUntested lists, for a run of level 2 and above, the machine's GPUs no test
// but the deployment checks passed on (proto.DCGMResult.Untested of the other tests).
// DCGM runs its deployment checks at every level and reports them on each GPU, so a run
// that skipped every test that runs the GPUs (PCIe, memory, stress: a host engine
// without its plugins, a GPU DCGM does not allow) still names each GPU as passed; level
// 1 is the deployment checks alone.
func hardwareUntested(r proto.DCGMResult) []int {
	if r.Level < 2 {
		return nil
	}
	hw := r
	hw.Tests = nil
	for _, t := range r.Tests {
		if !deploymentCheck(t) {
			hw.Tests = append(hw.Tests, t)
		}
	}
	return hw.Untested()
}

// deploymentCheck reports whether t is one of DCGM's deployment checks: its software
// plugin, the category Deployment of DCGM 3 and 4, or the test "software" asked by name.
func deploymentCheck(t proto.DCGMTest) bool {
	return strings.EqualFold(t.Category, "Deployment") || strings.EqualFold(t.Name, "software")
}

// joinInts lists GPU indices for a message: "0, 5".
func joinInts(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ", ")
}
