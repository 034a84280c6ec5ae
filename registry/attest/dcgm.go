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
// signature verifies, the result is of the level asked and every test passed on every
// GPU; the failing tests and their GPU indices are in the error's details.failed.
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
	}
	if failed := r.Failures(); len(failed) > 0 {
		var names []string
		for _, f := range failed {
			if len(f.GPUs) == 0 {
				names = append(names, f.Name)
				continue
			}
			gpus := make([]string, len(f.GPUs))
			for i, g := range f.GPUs {
				gpus[i] = strconv.Itoa(g)
			}
			names = append(names, fmt.Sprintf("%s (GPU %s)", f.Name, strings.Join(gpus, ", ")))
		}
		return nil, proto.Errorf(proto.DriverError, "diag.dcgm level %d: %d of %d tests failed: %s", r.Level, len(failed), len(r.Tests), strings.Join(names, "; ")).
			WithReason(proto.ReasonTestsFailed).WithFailed(failed)
	}
	r.Passed = true
	return proto.Marshal(DCGM{DCGMResult: r, Attestation: sr})
}
