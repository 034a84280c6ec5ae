package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

const bucketNodeTPM = "node-tpm"

// MeasuredBootPolicy is a pool's measured-boot policy (docs/attestation.md).
type MeasuredBootPolicy struct {
	// Mode is off ("" reads as off), record, tofu or golden.
	Mode string `json:"mode,omitempty"`
	// PCRs are the PCRs compared (proto.DefaultBootPCRs when empty).
	PCRs []int `json:"pcrs,omitempty"`
	// Golden are golden's values: a PCR's index in decimal to its SHA-256 value in hex.
	Golden map[string]string `json:"golden,omitempty"`
}

// NodeTPM is a node's TPM as measured boot enrolled it, its baseline and its last
// verified boot.
type NodeTPM struct {
	Node string `json:"node"`
	// EKPublic is the endorsement key (PKIX DER), EKCertificate its certificate where the
	// TPM holds one.
	EKPublic      []byte `json:"ekPublic"`
	EKCertificate []byte `json:"ekCertificate,omitempty"`
	// AKPublic is the attestation key's TPMT_PUBLIC, AKBlob the key wrapped by the TPM.
	AKPublic   []byte    `json:"akPublic"`
	AKBlob     []byte    `json:"akBlob"`
	EnrolledAt time.Time `json:"enrolledAt"`
	// Baseline is what later boots must match under tofu; nil until one is set.
	Baseline *BootBaseline `json:"baseline,omitempty"`
	// Last is the last verified boot, with its verdict.
	Last *proto.AttestBootResult `json:"last,omitempty"`
}

// BootBaseline is a node's golden values: a verified boot's PCRs and events.
type BootBaseline struct {
	PCRs   []proto.PCRValue  `json:"pcrs"`
	Events []proto.BootEvent `json:"events"`
	SetAt  time.Time         `json:"setAt"`
	// AcceptedBy is the credential that accepted it (nodes attest accept); "" for the
	// first verified boot of tofu.
	AcceptedBy string `json:"acceptedBy,omitempty"`
}

// NodeTPM returns the node's enrolled TPM; false when it has none.
func (t *Tx) NodeTPM(node string) (NodeTPM, bool, error) {
	var rec NodeTPM
	ok, err := t.get(bucketNodeTPM, []byte(node), &rec)
	return rec, ok, err
}

// PutNodeTPM stores a node's TPM record.
func (t *Tx) PutNodeTPM(rec NodeTPM) error {
	if err := proto.CheckNodeID(rec.Node); err != nil {
		return err
	}
	if rec.EnrolledAt.IsZero() {
		rec.EnrolledAt = t.now
	}
	return t.put(bucketNodeTPM, []byte(rec.Node), rec)
}
