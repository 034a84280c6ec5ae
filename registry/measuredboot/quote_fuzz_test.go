package measuredboot_test

import (
	"bytes"
	"crypto/rand"
	"reflect"
	"testing"

	"github.com/google/go-attestation/attest"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/measuredboot"
	"github.com/better-compute/better-compute/testkit/tpmboot"
)

// pcrsOf encodes quoted PCRs as a fuzz input: for each, its index, the length of its
// digest and the digest; fromPCRs reads them back, ignoring a short tail.
func pcrsOf(pcrs []proto.PCRValue) []byte {
	var b []byte
	for _, p := range pcrs {
		b = append(append(b, byte(p.Index), byte(len(p.Digest))), p.Digest...)
	}
	return b
}

func fromPCRs(b []byte) []proto.PCRValue {
	var out []proto.PCRValue
	for len(b) >= 2 && len(b)-2 >= int(b[1]) {
		out = append(out, proto.PCRValue{Index: int(b[0]), Digest: bytes.Clone(b[2 : 2+int(b[1])])})
		b = b[2+int(b[1]):]
	}
	return out
}

// FuzzVerifyQuote verifies any tpm.quote answer a ramdisk may send, against a software
// TPM's enrolled AK and the attestation's nonce: an accepted answer tells exactly the
// boot that TPM measured and quoted (its PCRs' values, the policy's events, Secure
// Boot's state), whatever quote, signature, PCR values and event log it carries; a
// refusal is DRIVER_ERROR with the reason quote.
func FuzzVerifyQuote(f *testing.F) {
	m, _ := tpmboot.Machine(f, boot("kernel 6.1"), nil)
	e, err := m.Enroll()
	if err != nil {
		f.Fatal(err)
	}
	n := make([]byte, 32)
	rand.Read(n)
	q, err := m.Quote(proto.TPMQuote{AKBlob: e.AKBlob, Nonce: n, PCRs: measuredboot.QuotedPCRs(proto.DefaultBootPCRs)})
	if err != nil {
		f.Fatal(err)
	}
	want, err := measuredboot.Verify(e.AKPublic, n, proto.DefaultBootPCRs, q)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(q.Quote, q.Signature, q.EventLog, pcrsOf(q.PCRs))
	f.Add(q.Quote, q.Signature, eventLog(boot("kernel 6.2")), pcrsOf(q.PCRs))
	f.Add(q.Quote, q.Signature, q.EventLog, pcrsOf(append(q.PCRs, q.PCRs[0])))
	f.Add(q.Quote, q.Signature, q.EventLog, pcrsOf(q.PCRs[1:]))
	f.Add(q.Quote, q.Signature, append(bytes.Clone(q.EventLog), q.EventLog[len(q.EventLog)-80:]...), pcrsOf(q.PCRs))
	f.Add(q.Quote[:len(q.Quote)/2], q.Signature, q.EventLog, pcrsOf(q.PCRs))
	f.Add([]byte{}, []byte{}, []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, quote, signature, log, pcrs []byte) {
		got, err := measuredboot.Verify(e.AKPublic, n, proto.DefaultBootPCRs,
			proto.TPMQuoteResult{Quote: quote, Signature: signature, EventLog: log, PCRs: fromPCRs(pcrs)})
		if err != nil {
			if e := proto.AsError(err); e.Code != proto.DriverError || e.Details.Reason != proto.ReasonQuote {
				t.Fatalf("refused with %v (reason %q), not DRIVER_ERROR quote", err, e.Details.Reason)
			}
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("accepted as the boot\n%+v\nthe TPM measured\n%+v", got, want)
		}
	})
}

// FuzzChallenge makes the activation credential for any tpm.enroll answer a ramdisk may
// send: one accepted has an endorsement key that parses and an AK Verify can later read
// (a restricted signing key the TPM made), and a credential and secret to send; a
// refusal is DRIVER_ERROR with the reason activation.
func FuzzChallenge(f *testing.F) {
	m, _ := tpmboot.Machine(f, boot("kernel 6.1"), nil)
	e, err := m.Enroll()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(e.EKPublic, e.EKCertificate, e.AKPublic, e.AKCreateData, e.AKCreateAttestation, e.AKCreateSignature)
	f.Add(e.EKPublic, []byte{0x30, 0x03, 0x02, 0x01, 0x01}, e.AKPublic, e.AKCreateData, e.AKCreateAttestation, e.AKCreateSignature)
	f.Add(e.EKPublic, e.EKCertificate, e.AKPublic[:len(e.AKPublic)-1], e.AKCreateData, e.AKCreateAttestation, e.AKCreateSignature)
	f.Add([]byte{}, []byte{}, []byte{}, []byte{}, []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, ek, ekCert, ak, createData, createAttestation, createSignature []byte) {
		in := proto.TPMEnrollResult{EKPublic: ek, EKCertificate: ekCert, AKPublic: ak, AKBlob: e.AKBlob,
			AKCreateData: createData, AKCreateAttestation: createAttestation, AKCreateSignature: createSignature}
		secret, act, err := measuredboot.Challenge(in)
		if err != nil {
			if e := proto.AsError(err); e.Code != proto.DriverError || e.Details.Reason != proto.ReasonActivation {
				t.Fatalf("refused with %v (reason %q), not DRIVER_ERROR activation", err, e.Details.Reason)
			}
			return
		}
		if _, err := attest.ParseAKPublic(ak); err != nil {
			t.Fatalf("an AK Verify cannot read was accepted: %v", err)
		}
		if len(secret) == 0 || len(act.Credential) == 0 || len(act.Secret) == 0 || !bytes.Equal(act.AKBlob, e.AKBlob) {
			t.Fatalf("accepted with secret %x and activation %+v", secret, act)
		}
	})
}
