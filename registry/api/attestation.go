package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
)

// NodeAttestation is the answer of metal.attestation and metal.acceptBoot: a node's
// measured boot (docs/attestation.md), its TPM as enrolled, its baseline and its last
// verified boot.
type NodeAttestation struct {
	NodeID string `json:"nodeId"`
	// Enrolled: the node's TPM is enrolled (its EK recorded, its AK proven by activation).
	Enrolled   bool       `json:"enrolled"`
	EnrolledAt *time.Time `json:"enrolledAt,omitempty"`
	// EKSHA256 is the SHA-256 of the endorsement key's public key (PKIX DER), in hex;
	// EKCertificate tells whether the TPM holds a certificate for it.
	EKSHA256      string        `json:"ekSha256,omitempty"`
	EKCertificate bool          `json:"ekCertificate,omitempty"`
	Baseline      *BootBaseline `json:"baseline,omitempty"`
	LastBoot      *AttestedBoot `json:"lastBoot,omitempty"`
}

// PCR is one PCR of the SHA-256 bank, its value in hex.
type PCR struct {
	Index  int    `json:"index"`
	SHA256 string `json:"sha256"`
}

// BootEvent is an event of a verified boot's log, decoded.
type BootEvent struct {
	PCR         int    `json:"pcr"`
	Type        string `json:"type"`
	SHA256      string `json:"sha256"`
	Description string `json:"description,omitempty"`
}

// BootBaseline is what later boots are compared with: its PCRs, when it was set, and
// the credential that accepted it ("" for tofu's first boot).
type BootBaseline struct {
	PCRs       []PCR     `json:"pcrs"`
	SetAt      time.Time `json:"setAt"`
	AcceptedBy string    `json:"acceptedBy,omitempty"`
}

// SecureBoot is what a verified boot's event log says of Secure Boot.
type SecureBoot struct {
	Enabled     bool     `json:"enabled"`
	Authorities []string `json:"authorities,omitempty"`
	Problem     string   `json:"problem,omitempty"`
}

// AttestedBoot is a verified boot with the policy's verdict.
type AttestedBoot struct {
	// Digest names the boot to metal.acceptBoot (metal.BootDigest): sha256: and the
	// SHA-256 of its PCR values.
	Digest     string      `json:"digest"`
	Mode       string      `json:"mode"`
	Verdict    string      `json:"verdict"`
	Mismatches []string    `json:"mismatches,omitempty"`
	PCRs       []PCR       `json:"pcrs"`
	Events     []BootEvent `json:"events"`
	SecureBoot SecureBoot  `json:"secureBoot"`
	VerifiedAt time.Time   `json:"verifiedAt"`
}

func pcrOf(p proto.PCRValue) PCR { return PCR{Index: p.Index, SHA256: hex.EncodeToString(p.Digest)} }

func bootEventOf(e proto.BootEvent) BootEvent {
	return BootEvent{PCR: e.PCR, Type: e.Type, SHA256: e.Digest, Description: e.Description}
}

func attestationOf(node string, rec store.NodeTPM, enrolled bool) NodeAttestation {
	out := NodeAttestation{NodeID: node, Enrolled: enrolled}
	if !enrolled {
		return out
	}
	ek := sha256.Sum256(rec.EKPublic)
	at := rec.EnrolledAt
	out.EnrolledAt, out.EKSHA256, out.EKCertificate = &at, hex.EncodeToString(ek[:]), len(rec.EKCertificate) > 0
	if b := rec.Baseline; b != nil {
		out.Baseline = &BootBaseline{PCRs: viewsOf(b.PCRs, pcrOf), SetAt: b.SetAt, AcceptedBy: b.AcceptedBy}
	}
	if l := rec.Last; l != nil {
		out.LastBoot = &AttestedBoot{Digest: metal.BootDigest(l.Boot), Mode: l.Mode, Verdict: l.Verdict, Mismatches: l.Mismatches, PCRs: viewsOf(l.Boot.PCRs, pcrOf),
			Events: viewsOf(l.Boot.Events, bootEventOf), SecureBoot: SecureBoot(l.Boot.SecureBoot), VerifiedAt: l.VerifiedAt}
	}
	return out
}

// AcceptBootRequest is the body of metal.acceptBoot: the node, and the boot accepted as
// metal.attestation shows it (lastBoot.digest), required.
type AcceptBootRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	NodeID   string `json:"nodeId"`
	Boot     string `json:"boot"`
}

// registerAttestation adds metal.attestation and metal.acceptBoot.
func (s *Server) registerAttestation() {
	Handle(s, "metal.attestation", ActionNodesRead, func(_ context.Context, c *Caller, req NodeKey) (out NodeAttestation, err error) {
		err = c.view(func(tx *store.Tx) error {
			n, err := tenantNode(tx, c, req)
			if err != nil {
				return err
			}
			rec, ok, err := tx.NodeTPM(n.ID)
			out = attestationOf(n.ID, rec, ok)
			return err
		})
		return out, err
	})
	Handle(s, "metal.acceptBoot", ActionNodesManage, func(_ context.Context, c *Caller, req AcceptBootRequest) (out NodeAttestation, err error) {
		err = c.update(func(tx *store.Tx) error {
			n, err := tenantNode(tx, c, NodeKey{TenantID: req.TenantID, NodeID: req.NodeID})
			if err != nil {
				return err
			}
			rec, err := metal.AcceptBoot(tx, n.ID, req.Boot, c.CredentialID)
			out = attestationOf(n.ID, rec, true)
			return err
		})
		if err == nil {
			s.log.Info("measured boot: baseline accepted", "node", out.NodeID, "boot", req.Boot, "credential", c.CredentialID)
		}
		return out, err
	})
}
