// Package attest is the registry's reading of node-signed results (disk.wipe,
// diag.dcgm): it verifies a result's signature against the certificate of the agent that
// answered, or one the agent CA issued to the same node and role, of a role that runs the
// result's kind (a wipe: the ramdisk), and against the command it answers (node, command
// id, kind), and it computes what the result claims itself, never taking the agent's
// word: a wipe is attested only when the signature verifies and every disk was wiped and
// read back as its method promises. The signed result is kept with the certificate, so
// an auditor verifies it offline with openssl (docs/agent-plane.md#node-signed-results).
package attest

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Verifier reads node-signed results.
type Verifier struct {
	// AgentCAs are the CAs that issue agent certificates.
	AgentCAs *x509.CertPool
	// Now is the clock a certificate other than the session's is checked at, and a
	// signed result's time against (signedWithin); time.Now when nil.
	Now func() time.Time
	// Current, if set, checks that a certificate of node's agent in role naming the
	// identity epoch and workflow run c does (proto.IdentityEpoch, proto.AgentRun) is of
	// the machine's current installation and, for a ramdisk, of a workflow that runs
	// (store.Tx.CheckAgent); its error refuses the result.
	Current func(c proto.AgentCredential) error
}

// readers are the node-signed kinds and how the registry reads each one's verified
// payload (nil when the signature did not verify) into the result it stores.
var readers = map[string]func(cmd proto.Command, sr *proto.SignedResult, p *proto.ResultPayload, refused error) (json.RawMessage, error){
	proto.CommandDiskWipe: readWipe,
	proto.CommandDiagDCGM: readDCGM,
}

// ClockSkew is how far an agent's clock may be from the registry's: a signed result's
// time may be that much before the command was relayed or after it was received
// (signedWithin). An agent signs by its machine's clock, which nothing sets in the
// ramdisk, and machines come from their factories with the hardware clock kept in some
// time zone's local time (UTC-12 to UTC+14): the allowance is the widest zone's offset
// and an hour of drift, so that no honest machine's wipe goes unattested for its clock,
// while a time days or years off is refused.
const ClockSkew = 15 * time.Hour

// Received is what the registry stores for res, the answer of the agent of node in
// role (whose session presented peer) to cmd, which the registry relayed at sent (the
// stored command's createdAt; zero when unknown): for a node-signed kind, its own reading
// of the signed result; any other result as it is.
func (v Verifier) Received(node string, role proto.Role, peer *x509.Certificate, cmd proto.Command, sent time.Time, res proto.Result) proto.Result {
	read := readers[cmd.Kind]
	if read == nil || res.Error != nil {
		return res
	}
	sr, p, refused := v.Verify(node, role, peer, cmd, sent, res.Result)
	out, err := read(cmd, sr, p, refused)
	if err != nil {
		return proto.Result{ID: res.ID, Error: proto.AsError(err)}
	}
	return proto.Result{ID: res.ID, Result: out}
}

// Verify reads raw as a proto.SignedResult and verifies it: its certificate is peer (the
// session's), or one the agent CAs issued for node in role (the agent renewed while the
// command ran); its signature verifies with that certificate's key; its payload answers
// cmd for node, signed while cmd ran: after sent, when the registry relayed it, and
// before now (signedWithin). It returns the signed result with the certificate that
// verified it, nil when raw is no signed result, and the payload, nil unless it verified.
func (v Verifier) Verify(node string, role proto.Role, peer *x509.Certificate, cmd proto.Command, sent time.Time, raw json.RawMessage) (*proto.SignedResult, *proto.ResultPayload, error) {
	var sr proto.SignedResult
	if err := json.Unmarshal(raw, &sr); err != nil || len(sr.Payload) == 0 {
		return nil, nil, proto.Errorf(proto.Forbidden, "the %s result is not signed: a node-signed result is {payload, algorithm, signature, certificate}", cmd.Kind).WithReason(proto.ReasonUnsigned)
	}
	cert, err := v.certificate(node, role, peer, cmd.Kind, sr.Certificate)
	if err != nil {
		sr.Certificate = nil
		return &sr, nil, err
	}
	sr.Certificate = cert.Raw
	p, err := VerifyResult(cert.PublicKey, sr, proto.ResultWant{NodeID: node, CommandID: cmd.ID, Kind: cmd.Kind})
	if err == nil {
		err = signedWithin(p.Time, sent, v.now())
	}
	if err != nil {
		return &sr, nil, err
	}
	return &sr, &p, nil
}

// signedWithin refuses a payload signed at signed outside the life of its command: from
// sent, when the registry relayed it (zero: not known, not checked), to now, when its
// answer arrived, each widened by ClockSkew. An agent signs as it answers, so a time
// outside that is not when the result was made, and it is the time the stored
// attestation claims: the one an auditor reads as when the disks were wiped and checks
// the agent's certificate at (openssl verify -attime).
func signedWithin(signed, sent, now time.Time) error {
	switch {
	case !sent.IsZero() && signed.Before(sent.Add(-ClockSkew)):
		return proto.Errorf(proto.Forbidden, "signed result: signed at %s, before the registry relayed the command at %s (%s earlier, more than the %s the clocks may differ by)",
			signed.UTC().Format(time.RFC3339), sent.UTC().Format(time.RFC3339), sent.Sub(signed).Round(time.Second), ClockSkew).WithReason(proto.ReasonTime)
	case signed.After(now.Add(ClockSkew)):
		return proto.Errorf(proto.Forbidden, "signed result: signed at %s, after it was received at %s (%s later, more than the %s the clocks may differ by)",
			signed.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), signed.Sub(now).Round(time.Second), ClockSkew).WithReason(proto.ReasonTime)
	}
	return nil
}

// now is the verifier's clock: Now, else time.Now.
func (v Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// certificate is the certificate a signed result of kind is verified with: the
// session's own, or the one the result carries when the agent CAs issued it for node in
// role now; either of a role that runs kind (signedAs) and of the machine's current
// installation (Current).
func (v Verifier) certificate(node string, role proto.Role, peer *x509.Certificate, kind string, carried []byte) (*x509.Certificate, error) {
	c, err := v.issued(node, role, peer, carried)
	if err == nil {
		err = signedAs(kind, c)
	}
	if err == nil && v.Current != nil {
		var epoch int64
		if epoch, err = proto.IdentityEpoch(c); err == nil {
			err = v.Current(proto.AgentCredential{Node: node, Role: role, Epoch: epoch, Run: proto.AgentRun(c)})
		}
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// signedAs refuses c, the certificate a result of kind is verified with, unless it names
// a role whose agent runs kind (proto.RelayRoles, the relay's own table). A disk.wipe's
// is the ramdisk alone: the installed OS's root user can read its own agent's key, so a
// wipe it signed would vouch for itself.
func signedAs(kind string, c *x509.Certificate) error {
	roles, _ := proto.RelayRoles(kind)
	ou := c.Subject.OrganizationalUnit
	if len(ou) == 1 && slices.Contains(roles, proto.Role(ou[0])) {
		return nil
	}
	if len(roles) == 0 {
		return proto.Errorf(proto.Forbidden, "no agent runs %s, so no agent's signed result of it counts", kind).WithReason(proto.ReasonRole)
	}
	want := proto.RolesText(roles)
	return proto.Errorf(proto.Forbidden, "a %s result counts only when the node's %s agent signs it, and this one is signed by a %s certificate: relay %s to the machine's %s",
		kind, want, strings.Join(ou, ","), kind, want).WithReason(proto.ReasonRole)
}

// issued is the certificate a signed result is verified with, as the agent CAs issued
// it: the session's own, or the one the result carries when they issued it for node in
// role now.
func (v Verifier) issued(node string, role proto.Role, peer *x509.Certificate, carried []byte) (*x509.Certificate, error) {
	if peer == nil {
		return nil, proto.Errorf(proto.Forbidden, "no agent certificate to verify the signed result with").WithReason(proto.ReasonCertificate)
	}
	if len(carried) == 0 || string(carried) == string(peer.Raw) {
		return peer, nil
	}
	c, err := x509.ParseCertificate(carried)
	if err != nil {
		return nil, proto.Errorf(proto.Forbidden, "the signed result's certificate: %v", err).WithReason(proto.ReasonCertificate)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: v.AgentCAs, CurrentTime: v.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, proto.Errorf(proto.Forbidden, "the signed result's certificate is not the agent CA's: %v", err).WithReason(proto.ReasonCertificate)
	}
	if c.Subject.CommonName != node || len(c.Subject.OrganizationalUnit) != 1 || c.Subject.OrganizationalUnit[0] != string(role) {
		return nil, proto.Errorf(proto.Forbidden, "the signed result's certificate names %s %q, not the %s of node %s",
			c.Subject.OrganizationalUnit, c.Subject.CommonName, role, node).WithReason(proto.ReasonCertificate)
	}
	return c, nil
}

// Wipe is the result the registry stores for disk.wipe.
type Wipe struct {
	// Attested is the registry's verdict: the signature verified, and every disk was
	// wiped and passed its read-back. Reason says why not.
	Attested bool   `json:"attested"`
	Reason   string `json:"reason,omitempty"`
	// Mode and Disks are the signed result's, empty when the signature did not verify.
	Mode  string            `json:"mode,omitempty"`
	Disks []proto.WipedDisk `json:"disks,omitempty"`
	// Attestation is the signed result as received, with the certificate that verified
	// it.
	Attestation *proto.SignedResult `json:"attestation,omitempty"`
}

// readWipe computes a wipe's verdict.
func readWipe(cmd proto.Command, sr *proto.SignedResult, p *proto.ResultPayload, refused error) (json.RawMessage, error) {
	w := Wipe{Attestation: sr}
	if refused != nil {
		w.Reason = refused.Error()
		return proto.Marshal(w)
	}
	var r proto.DiskWipeResult
	if err := json.Unmarshal(p.Result, &r); err != nil {
		w.Reason = fmt.Sprintf("the signed result is not a disk.wipe result: %v", err)
		return proto.Marshal(w)
	}
	var asked proto.DiskWipe
	if len(cmd.Payload) > 0 {
		if err := json.Unmarshal(cmd.Payload, &asked); err != nil {
			return nil, proto.Errorf(proto.Internal, "disk.wipe input: %v", err)
		}
	}
	if asked.Mode == "" {
		asked.Mode = proto.WipeQuick
	}
	w.Mode, w.Disks = r.Mode, r.Disks
	w.Attested, w.Reason = verdict(asked.Mode, r)
	return proto.Marshal(w)
}

// methods are the methods that wipe a disk in each mode: never a weaker one.
var methods = map[string][]string{
	proto.WipeQuick: {proto.WipeMethodSignatures},
	proto.WipeSecureErase: {proto.WipeMethodNVMeFormatUserData, proto.WipeMethodNVMeSanitizeBlock, proto.WipeMethodATASecurityErase,
		proto.WipeMethodSecureDiscard, proto.WipeMethodNVMeFormatCrypto, proto.WipeMethodNVMeSanitizeCrypto, proto.WipeMethodATACryptoScramble},
	proto.WipeCryptoErase: {proto.WipeMethodNVMeFormatCrypto, proto.WipeMethodNVMeSanitizeCrypto, proto.WipeMethodATACryptoScramble},
}

// verdict is whether r, the result of a wipe in mode, wiped every disk by a method of
// that mode and read each back as promised.
func verdict(mode string, r proto.DiskWipeResult) (bool, string) {
	switch {
	case r.Mode != mode:
		return false, fmt.Sprintf("the machine wiped in mode %q, not %q", r.Mode, mode)
	case mode == proto.WipeNone:
		return false, "mode none wipes nothing"
	}
	if len(r.Disks) == 0 {
		return false, "the machine reported no disk wiped"
	}
	for _, d := range r.Disks {
		switch {
		case !d.Wiped:
			return false, fmt.Sprintf("disk %s was not wiped (%s)", d.Name, d.Unwiped)
		case !slices.Contains(methods[mode], d.Method):
			return false, fmt.Sprintf("disk %s was wiped by %q, which is no %s method", d.Name, d.Method, mode)
		case d.ReadBack == nil:
			return false, fmt.Sprintf("disk %s was not read back", d.Name)
		case !d.ReadBack.Passed:
			return false, fmt.Sprintf("disk %s failed its read-back: %s", d.Name, d.ReadBack.Failure)
		case slices.ContainsFunc(d.Hidden, proto.HiddenCapacity.HoldsData):
			return false, fmt.Sprintf("disk %s has capacity the wipe could not reach: %s", d.Name, proto.HiddenText(d.Hidden))
		}
	}
	return true, ""
}

// Of is the signed result a stored node-signed result carries in its `attestation`
// field, nil when it carries none.
func Of(stored json.RawMessage) *proto.SignedResult {
	var r struct {
		Attestation *proto.SignedResult `json:"attestation"`
	}
	if json.Unmarshal(stored, &r) != nil {
		return nil
	}
	return r.Attestation
}
