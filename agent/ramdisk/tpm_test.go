package ramdisk

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/better-compute/better-compute/hardware/tpm"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/measuredboot"
	"github.com/better-compute/better-compute/testkit/tpmboot"
)

// The ramdisk's measured-boot handlers, over a software TPM, answer what the registry
// verifies: enrollment, activation and a quote, each through its JSON; a strict input
// is refused with its path.
func TestTPMHandlers(t *testing.T) {
	events := tpmboot.Boot("kernel 6.1")
	m, sw := tpmboot.Machine(t, events, nil)
	m.Close()
	h := tpmHandlers(func() (*tpm.TPM, error) { return tpmboot.Open(t, sw, tpmboot.EventLog(events)), nil })
	call := func(kind string, in, out any) error {
		raw, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		res, err := h[kind](context.Background(), raw)
		if err != nil {
			return err
		}
		return json.Unmarshal(res, out)
	}
	var e proto.TPMEnrollResult
	if err := call(proto.CommandTPMEnroll, struct{}{}, &e); err != nil {
		t.Fatal(err)
	}
	secret, act, err := measuredboot.Challenge(e)
	if err != nil {
		t.Fatal(err)
	}
	var got proto.TPMActivateResult
	if err := call(proto.CommandTPMActivate, act, &got); err != nil || string(got.Secret) != string(secret) {
		t.Fatalf("activation: %v", err)
	}
	nonce := []byte("a registry nonce of thirty-two b")
	var q proto.TPMQuoteResult
	if err := call(proto.CommandTPMQuote, proto.TPMQuote{AKBlob: e.AKBlob, Nonce: nonce, PCRs: []int{0, 2, 4, 7}}, &q); err != nil {
		t.Fatal(err)
	}
	if _, err := measuredboot.Verify(e.AKPublic, nonce, proto.DefaultBootPCRs, q); err != nil {
		t.Fatal(err)
	}
	_, err = h[proto.CommandTPMQuote](context.Background(), json.RawMessage(`{"akBlob":"","nonce":"","pcrs":[0],"extra":1}`))
	if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "extra" {
		t.Fatalf("an input with an unknown field: %v (path %q)", err, e.Details.Path)
	}
}
