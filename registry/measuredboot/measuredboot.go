// Package measuredboot is the registry's side of measured boot (docs/attestation.md): the
// activation challenge that proves a machine's attestation key (AK) lives in the TPM of
// its endorsement key (EK), the verification of a quote over the registry's nonce with the
// node's AK, the replay of the firmware's event log against the quoted PCRs, the events
// decoded for people, and the comparison with a baseline or golden values. It imports
// only proto of the project.
package measuredboot

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/google/go-attestation/attest"

	"github.com/better-compute/better-compute/proto"
)

// Challenge checks the AK an enrollment reports (a restricted signing key the TPM made
// itself) and makes a credential that only the TPM holding both the EK and the AK can
// decrypt: the input of tpm.activate, and the secret its answer must carry.
func Challenge(e proto.TPMEnrollResult) (secret []byte, in proto.TPMActivate, err error) {
	ek, err := x509.ParsePKIXPublicKey(e.EKPublic)
	if err != nil {
		return nil, in, proto.Errorf(proto.DriverError, "the TPM's endorsement key does not parse: %v", err).WithReason(proto.ReasonActivation)
	}
	if len(e.EKCertificate) > 0 {
		cert, err := attest.ParseEKCertificate(e.EKCertificate)
		if err != nil {
			return nil, in, proto.Errorf(proto.DriverError, "the TPM's EK certificate does not parse: %v", err).WithReason(proto.ReasonActivation)
		}
		if pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(ek) {
			return nil, in, proto.Errorf(proto.DriverError, "the TPM's EK certificate certifies another key than its endorsement key").WithReason(proto.ReasonActivation)
		}
	}
	p := attest.ActivationParameters{EK: ek, AK: attest.AttestationParameters{Public: e.AKPublic,
		CreateData: e.AKCreateData, CreateAttestation: e.AKCreateAttestation, CreateSignature: e.AKCreateSignature}}
	secret, cred, err := p.Generate()
	if err != nil {
		return nil, in, proto.Errorf(proto.DriverError, "the TPM's attestation key is not one a TPM made for attestation: %v", err).WithReason(proto.ReasonActivation)
	}
	return secret, proto.TPMActivate{AKBlob: e.AKBlob, Credential: cred.Credential, Secret: cred.Secret}, nil
}

// QuotedPCRs are the PCRs a quote covers for a policy's pcrs: those, and PCR 7, whose
// events tell Secure Boot's state.
func QuotedPCRs(pcrs []int) []int {
	out := slices.Clone(pcrs)
	if !slices.Contains(out, 7) {
		out = append(out, 7)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Verify checks a tpm.quote answer: the quote is signed by the AK (akPublic, the AK's
// TPMT_PUBLIC), over nonce, and covers each of pcrs with the values it carries; the event
// log replays to those values. It returns the boot: the quoted PCRs, the events of pcrs
// decoded, Secure Boot's state. Any failure is DRIVER_ERROR with the reason quote.
func Verify(akPublic, nonce []byte, pcrs []int, q proto.TPMQuoteResult) (proto.MeasuredBoot, error) {
	fail := func(format string, args ...any) (proto.MeasuredBoot, error) {
		return proto.MeasuredBoot{}, proto.Errorf(proto.DriverError, format, args...).WithReason(proto.ReasonQuote)
	}
	ak, err := attest.ParseAKPublic(akPublic)
	if err != nil {
		return fail("the node's attestation key does not parse: %v", err)
	}
	if len(q.EventLog) > proto.MaxEventLog {
		return fail("the event log is %d bytes, more than the %d a registry reads", len(q.EventLog), proto.MaxEventLog)
	}
	var quoted []attest.PCR
	for _, p := range q.PCRs {
		if len(p.Digest) != 32 {
			return fail("PCR %d's SHA-256 value is %d bytes, not 32", p.Index, len(p.Digest))
		}
		if slices.ContainsFunc(quoted, func(o attest.PCR) bool { return o.Index == p.Index }) {
			return fail("PCR %d is given twice", p.Index)
		}
		quoted = append(quoted, attest.PCR{Index: p.Index, Digest: p.Digest, DigestAlg: crypto.SHA256})
	}
	if err := ak.Verify(attest.Quote{Quote: q.Quote, Signature: q.Signature}, quoted, nonce); err != nil {
		return fail("the quote does not verify with the node's attestation key over this attestation's nonce: %v", err)
	}
	for _, want := range QuotedPCRs(pcrs) {
		i := slices.IndexFunc(quoted, func(p attest.PCR) bool { return p.Index == want })
		if i < 0 || !quoted[i].QuoteVerified() {
			return fail("the quote does not cover PCR %d", want)
		}
	}
	if err := checkAlgorithms(q.EventLog); err != nil {
		return fail("the event log does not parse: %v", err)
	}
	el, err := attest.ParseEventLog(q.EventLog)
	if err != nil {
		return fail("the event log does not parse: %v", err)
	}
	var verified []attest.PCR
	for _, p := range quoted {
		if p.QuoteVerified() {
			verified = append(verified, p)
		}
	}
	events, err := el.Verify(verified)
	if err != nil {
		return fail("the event log does not replay to the quoted PCRs: %v", err)
	}
	if err := checkUnlogged(verified, events); err != nil {
		return fail("the event log does not replay to the quoted PCRs: %v", err)
	}
	boot := proto.MeasuredBoot{SecureBoot: secureBoot(events), Events: []proto.BootEvent{}}
	for _, p := range verified {
		boot.PCRs = append(boot.PCRs, proto.PCRValue{Index: p.Index, Digest: p.Digest})
	}
	slices.SortFunc(boot.PCRs, func(a, b proto.PCRValue) int { return a.Index - b.Index })
	for _, e := range events {
		if slices.Contains(pcrs, e.Index) {
			boot.Events = append(boot.Events, decode(e))
		}
	}
	return boot, nil
}

// secureBoot reads Secure Boot's state from the verified events. The subjects of the
// certificates that verified the chain are the log's, untrusted as the events' data:
// kept printable, as decode keeps the events' descriptions.
func secureBoot(events []attest.Event) proto.SecureBootState {
	sb, err := attest.ParseSecurebootState(events)
	if err != nil {
		return proto.SecureBootState{Problem: err.Error()}
	}
	out := proto.SecureBootState{Enabled: sb.Enabled}
	for _, c := range append(slices.Clone(sb.PreSeparatorAuthority), sb.PostSeparatorAuthority...) {
		if s := printable([]byte(c.Subject.String())); !slices.Contains(out.Authorities, s) {
			out.Authorities = append(out.Authorities, s)
		}
	}
	return out
}

// Compare names what differs between a boot and the PCR values wanted of it (a
// baseline's or the operator's golden values), for each of pcrs: the PCR, and the events
// of it that the baseline's events (nil for golden values) do not have, and those it has
// that the boot lacks. Nothing differs: nil.
func Compare(pcrs []int, want []proto.PCRValue, baseline []proto.BootEvent, boot proto.MeasuredBoot) []string {
	var out []string
	for _, idx := range pcrs {
		w, g := pcrValue(want, idx), pcrValue(boot.PCRs, idx)
		if w != nil && bytes.Equal(w, g) {
			continue
		}
		msg := fmt.Sprintf("PCR %d is %s, expected %s", idx, hexOr(g), hexOr(w))
		if baseline != nil {
			added, removed := diffEvents(of(baseline, idx), of(boot.Events, idx))
			for _, e := range added {
				msg += "; new event " + describe(e)
			}
			for _, e := range removed {
				msg += "; missing event " + describe(e)
			}
		}
		out = append(out, msg)
	}
	return out
}

func pcrValue(vs []proto.PCRValue, idx int) []byte {
	for _, v := range vs {
		if v.Index == idx {
			return v.Digest
		}
	}
	return nil
}

func hexOr(b []byte) string {
	if b == nil {
		return "(none)"
	}
	return hex.EncodeToString(b)
}

func of(events []proto.BootEvent, pcr int) []proto.BootEvent {
	var out []proto.BootEvent
	for _, e := range events {
		if e.PCR == pcr {
			out = append(out, e)
		}
	}
	return out
}

// diffEvents returns the events of got that want does not have, and those of want that
// got does not, matched by type and digest, each as often as it occurs.
func diffEvents(want, got []proto.BootEvent) (added, removed []proto.BootEvent) {
	left := slices.Clone(want)
	for _, e := range got {
		i := slices.IndexFunc(left, func(w proto.BootEvent) bool { return w.Type == e.Type && w.Digest == e.Digest })
		if i < 0 {
			added = append(added, e)
			continue
		}
		left = slices.Delete(left, i, i+1)
	}
	return added, left
}

func describe(e proto.BootEvent) string {
	s := e.Type + " sha256:" + e.Digest
	if e.Description != "" {
		s += " (" + e.Description + ")"
	}
	return s
}
