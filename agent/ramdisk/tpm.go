package ramdisk

import (
	"context"
	"encoding/json"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/hardware/tpm"
	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
)

// tpmHandlers are the handlers of measured boot's commands (docs/attestation.md) over
// the TPM open opens, for each command and closed after it. A machine without a TPM
// answers UNSUPPORTED with the reason no-tpm.
func tpmHandlers(open func() (*tpm.TPM, error)) map[string]session.Handler {
	return map[string]session.Handler{
		proto.CommandTPMEnroll: tpmHandler(open, proto.CommandTPMEnroll, func(t *tpm.TPM, _ struct{}) (proto.TPMEnrollResult, error) {
			return t.Enroll()
		}),
		proto.CommandTPMActivate: tpmHandler(open, proto.CommandTPMActivate, (*tpm.TPM).Activate),
		proto.CommandTPMQuote:    tpmHandler(open, proto.CommandTPMQuote, (*tpm.TPM).Quote),
	}
}

func tpmHandler[I, O any](open func() (*tpm.TPM, error), kind string, do func(*tpm.TPM, I) (O, error)) session.Handler {
	return func(_ context.Context, payload json.RawMessage) (json.RawMessage, error) {
		var in I
		if err := (jsondoc.Decoder{Name: kind + "'s input"}).Decode(payload, &in); err != nil {
			return nil, err
		}
		t, err := open()
		if err != nil {
			return nil, err
		}
		defer t.Close()
		out, err := do(t, in)
		if err != nil {
			return nil, proto.Errorf(proto.DriverError, "%s: %v", kind, err)
		}
		return proto.Marshal(out)
	}
}
