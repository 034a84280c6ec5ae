package measuredboot

import (
	"fmt"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-attestation/attest"
)

// ParseEventLog parses a TCG event log without replaying it and decodes its SHA-256
// events: what Verify reads from a machine, decoded as Verify decodes it, for the fuzzer.
func ParseEventLog(raw []byte) ([]proto.BootEvent, error) {
	if len(raw) > proto.MaxEventLog {
		return nil, fmt.Errorf("the event log is %d bytes, more than the %d a registry reads", len(raw), proto.MaxEventLog)
	}
	if err := checkAlgorithms(raw); err != nil {
		return nil, err
	}
	el, err := attest.ParseEventLog(raw)
	if err != nil {
		return nil, err
	}
	var out []proto.BootEvent
	for _, e := range el.Events(attest.HashSHA256) {
		out = append(out, decode(e))
	}
	return out, nil
}
