// Package tpm is the machine's side of measured boot (docs/attestation.md): its TPM 2.0,
// through go-attestation, enrolled (the endorsement key, a new attestation key),
// activating the registry's credential, and quoting the boot PCRs of the SHA-256 bank over
// the registry's nonce with the firmware's event log. bcd ramdisk answers tpm.enroll,
// tpm.activate and tpm.quote with it.
package tpm

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/google/go-attestation/attest"

	"github.com/better-compute/better-compute/proto"
)

// TPM is an open TPM 2.0.
type TPM struct {
	t *attest.TPM
}

// Channel is a TPM 2.0 command channel with the firmware's event log beside it: a socket
// to a software TPM, in tests.
type Channel = attest.CommandChannelTPM20

// Open opens the machine's TPM 2.0 (the kernel's resource manager, /dev/tpmrm0, and the
// event log under securityfs). A machine without one is UNSUPPORTED with the reason no-tpm.
func Open() (*TPM, error) {
	if _, err := os.Stat("/dev/tpmrm0"); errors.Is(err, os.ErrNotExist) {
		return nil, proto.Errorf(proto.Unsupported, "this machine has no TPM 2.0 (no /dev/tpmrm0): measured boot cannot attest it").WithReason(proto.ReasonNoTPM)
	}
	t, err := attest.OpenTPM(&attest.OpenConfig{})
	if err != nil {
		return nil, proto.Errorf(proto.Unsupported, "the TPM does not open: %v", err).WithReason(proto.ReasonNoTPM)
	}
	return &TPM{t: t}, nil
}

// OpenChannel opens the TPM 2.0 at the end of ch.
func OpenChannel(ch Channel) (*TPM, error) {
	t, err := attest.OpenTPM(&attest.OpenConfig{CommandChannel: ch})
	if err != nil {
		return nil, fmt.Errorf("tpm: %w", err)
	}
	return &TPM{t: t}, nil
}

// Close closes the TPM.
func (t *TPM) Close() error { return t.t.Close() }

// Enroll reports the endorsement key (and its certificate where the TPM holds one) and
// makes a new attestation key, returned wrapped by the TPM with its creation parameters.
func (t *TPM) Enroll() (proto.TPMEnrollResult, error) {
	eks, err := t.t.EKs()
	if err != nil || len(eks) == 0 {
		return proto.TPMEnrollResult{}, fmt.Errorf("tpm: the endorsement key: %v", err)
	}
	ek := eks[0]
	pub, err := x509.MarshalPKIXPublicKey(ek.Public)
	if err != nil {
		return proto.TPMEnrollResult{}, fmt.Errorf("tpm: the endorsement key: %w", err)
	}
	out := proto.TPMEnrollResult{EKPublic: pub}
	if ek.Certificate != nil {
		out.EKCertificate = ek.Certificate.Raw
	}
	ak, err := t.t.NewAK(nil)
	if err != nil {
		return proto.TPMEnrollResult{}, fmt.Errorf("tpm: a new attestation key: %w", err)
	}
	defer ak.Close(t.t)
	if out.AKBlob, err = ak.Marshal(); err != nil {
		return proto.TPMEnrollResult{}, fmt.Errorf("tpm: the attestation key: %w", err)
	}
	p := ak.AttestationParameters()
	out.AKPublic, out.AKCreateData, out.AKCreateAttestation, out.AKCreateSignature = p.Public, p.CreateData, p.CreateAttestation, p.CreateSignature
	return out, nil
}

// Activate loads the attestation key and has the TPM decrypt the registry's credential,
// which only the TPM holding the endorsement key and that AK can.
func (t *TPM) Activate(in proto.TPMActivate) (proto.TPMActivateResult, error) {
	ak, err := t.t.LoadAK(in.AKBlob)
	if err != nil {
		return proto.TPMActivateResult{}, fmt.Errorf("tpm: the attestation key does not load in this TPM: %w", err)
	}
	defer ak.Close(t.t)
	secret, err := ak.ActivateCredential(t.t, attest.EncryptedCredential{Credential: in.Credential, Secret: in.Secret})
	if err != nil {
		return proto.TPMActivateResult{}, fmt.Errorf("tpm: activating the credential: %w", err)
	}
	return proto.TPMActivateResult{Secret: secret}, nil
}

// Quote quotes in.PCRs of the SHA-256 bank over in.Nonce with the attestation key, and
// returns the quote, those PCRs' values and the event log.
func (t *TPM) Quote(in proto.TPMQuote) (proto.TPMQuoteResult, error) {
	ak, err := t.t.LoadAK(in.AKBlob)
	if err != nil {
		return proto.TPMQuoteResult{}, fmt.Errorf("tpm: the attestation key does not load in this TPM: %w", err)
	}
	defer ak.Close(t.t)
	q, err := ak.QuotePCRs(t.t, in.Nonce, attest.HashSHA256, in.PCRs)
	if err != nil {
		return proto.TPMQuoteResult{}, fmt.Errorf("tpm: quote: %w", err)
	}
	pcrs, err := t.t.PCRs(attest.HashSHA256)
	if err != nil {
		return proto.TPMQuoteResult{}, fmt.Errorf("tpm: reading PCRs: %w", err)
	}
	out := proto.TPMQuoteResult{Quote: q.Quote, Signature: q.Signature}
	for _, p := range pcrs {
		if slices.Contains(in.PCRs, p.Index) {
			out.PCRs = append(out.PCRs, proto.PCRValue{Index: p.Index, Digest: p.Digest})
		}
	}
	if out.EventLog, err = t.t.MeasurementLog(); err != nil {
		return proto.TPMQuoteResult{}, fmt.Errorf("tpm: the event log: %w", err)
	}
	return out, nil
}
