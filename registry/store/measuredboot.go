package store

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/better-compute/better-compute/proto"
)

const bucketNodeTPM = "node-tpm"

// bucketNodeTPMByEK indexes the enrolled TPMs by endorsement key: the hex SHA-256 of the
// EK (PKIX DER) to the node it is enrolled for, so that one TPM is enrolled for one node
// (TPMEnrolledFor). PutNodeTPM writes it; indexTPMs brings a store written before it
// up to the records.
const bucketNodeTPMByEK = "node_tpm_by_ek"

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

// PutNodeTPM stores a node's TPM record, and indexes its EK (bucketNodeTPMByEK). An EK
// enrolled for another node is INVALID_STATE, reason ek-enrolled, naming neither node:
// the caller, which knows whose node asks, says more (metal's enrollTPM).
func (t *Tx) PutNodeTPM(rec NodeTPM) error {
	if err := proto.CheckNodeID(rec.Node); err != nil {
		return err
	}
	if rec.EnrolledAt.IsZero() {
		rec.EnrolledAt = t.now
	}
	if len(rec.EKPublic) > 0 {
		if other := t.TPMEnrolledFor(rec.EKPublic); other != "" && other != rec.Node {
			return proto.Errorf(proto.InvalidState, "this TPM's endorsement key is enrolled for another node already").WithReason(proto.ReasonEKEnrolled)
		}
		if err := t.putRaw(bucketNodeTPMByEK, ekKey(rec.EKPublic), []byte(rec.Node)); err != nil {
			return err
		}
	}
	return t.put(bucketNodeTPM, []byte(rec.Node), rec)
}

// TPMEnrolledFor is the node the TPM of endorsement key ek (PKIX DER) is enrolled for,
// "" when none is.
func (t *Tx) TPMEnrolledFor(ek []byte) string {
	return string(t.getRaw(bucketNodeTPMByEK, ekKey(ek)))
}

// ekKey is an EK's key in bucketNodeTPMByEK.
func ekKey(ek []byte) []byte {
	sum := sha256.Sum256(ek)
	return []byte(hex.EncodeToString(sum[:]))
}

// indexTPMs gives every enrolled TPM its bucketNodeTPMByEK entry, at every open: a store
// whose TPMs a registry enrolled before the index existed (or a replica of that release
// since, in a rolling upgrade) holds records without one. It reads in one transaction
// and writes only the entries missing, reindexChunk a transaction, each looked up again
// there; an EK two nodes were enrolled with before keeps the entry of the first in key
// order (both nodes keep attesting with it; no third is enrolled with it).
func (s *Store) indexTPMs() error {
	var missing []NodeTPM
	err := s.View(func(tx *Tx) error {
		c := tx.kv.cursor(bucketNodeTPM)
		for k, v := c.First(); k != nil; k, v = c.Next() {
			var rec struct {
				Node     string `json:"node"`
				EKPublic []byte `json:"ekPublic"`
			}
			if err := decode(bucketNodeTPM, k, v, &rec); err != nil {
				return err
			}
			if len(rec.EKPublic) > 0 && tx.TPMEnrolledFor(rec.EKPublic) == "" {
				missing = append(missing, NodeTPM{Node: rec.Node, EKPublic: rec.EKPublic})
			}
		}
		return nil
	})
	for len(missing) > 0 && err == nil {
		chunk := missing[:min(reindexChunk, len(missing))]
		missing = missing[len(chunk):]
		err = s.Update(func(tx *Tx) error {
			for _, rec := range chunk {
				if tx.TPMEnrolledFor(rec.EKPublic) != "" {
					continue
				}
				if err := tx.putRaw(bucketNodeTPMByEK, ekKey(rec.EKPublic), []byte(rec.Node)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return err
}
