package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// ImageSigner is one public key on a tenant's image-signer allowlist; the root tenant's
// signers are the platform's. A signer is never deleted: revoking keeps the row, so its
// id stays bound to its key and its history is kept.
type ImageSigner struct {
	Tenant string `json:"tenantId"`
	ID     string `json:"id"`
	// Algorithm is "ed25519" or "ecdsa-p256".
	Algorithm string `json:"algorithm"`
	// PublicKey is the SPKI PEM the host added.
	PublicKey string `json:"publicKey"`
	// Fingerprint is "sha256/" and the base64 SHA-256 of the DER SPKI.
	Fingerprint string        `json:"fingerprint"`
	AddedAt     time.Time     `json:"addedAt"`
	RevokedAt   time.Time     `json:"revokedAt,omitzero"`
	History     []SignerEvent `json:"history"`
}

// Revoked reports whether the signer is revoked now.
func (s ImageSigner) Revoked() bool { return !s.RevokedAt.IsZero() }

// SignerEvent is one change of a signer: "added", "revoked" or "reinstated".
type SignerEvent struct {
	Event string    `json:"event"`
	At    time.Time `json:"at"`
}

const bucketImageSigners = "image_signers"

func signerKey(tenant, id string) []byte { return []byte(tenant + "\x00" + id) }

// AddImageSigner puts a signer on its tenant's allowlist. An id the tenant uses already
// is CONFLICT, except that a revoked signer is reinstated when the same key is added
// again: an id never names another key.
func (t *Tx) AddImageSigner(s ImageSigner) (ImageSigner, error) {
	if _, err := t.Tenant(s.Tenant); err != nil {
		return ImageSigner{}, err
	}
	var old ImageSigner
	found, err := t.get(bucketImageSigners, signerKey(s.Tenant, s.ID), &old)
	switch {
	case err != nil:
		return ImageSigner{}, err
	case !found:
		s.AddedAt = t.now
		s.RevokedAt = time.Time{}
		s.History = []SignerEvent{{Event: "added", At: t.now}}
	case old.Fingerprint != s.Fingerprint:
		return ImageSigner{}, proto.Errorf(proto.Conflict, "signer %q of tenant %q was added with another key (%s); signer ids are never reused, pick a new id", s.ID, s.Tenant, old.Fingerprint).WithPath("id")
	case !old.Revoked():
		return ImageSigner{}, proto.Errorf(proto.Conflict, "signer %q of tenant %q exists already: `signers list` shows its key; add another key under a new id", s.ID, s.Tenant).WithPath("id")
	default:
		s = old
		s.RevokedAt = time.Time{}
		s.History = append(s.History, SignerEvent{Event: "reinstated", At: t.now})
	}
	return s, t.put(bucketImageSigners, signerKey(s.Tenant, s.ID), s)
}

// RevokeImageSigner takes a signer off its tenant's allowlist, keeping its row. A
// signer revoked already is INVALID_STATE.
func (t *Tx) RevokeImageSigner(tenant, id string) (ImageSigner, error) {
	s, err := t.ImageSigner(tenant, id)
	if err != nil {
		return s, err
	}
	if s.Revoked() {
		return s, proto.Errorf(proto.InvalidState, "signer %q of tenant %q is revoked already", id, tenant)
	}
	s.RevokedAt = t.now
	s.History = append(s.History, SignerEvent{Event: "revoked", At: t.now})
	return s, t.put(bucketImageSigners, signerKey(tenant, id), s)
}

// ImageSigner returns one signer of tenant's allowlist, revoked or not.
func (t *Tx) ImageSigner(tenant, id string) (ImageSigner, error) {
	var s ImageSigner
	ok, err := t.get(bucketImageSigners, signerKey(tenant, id), &s)
	if err == nil && !ok {
		err = notFound("signer", id)
	}
	return s, err
}

// ImageSigners lists the signers of tenant, or of every tenant when tenant is empty,
// revoked ones included, one page at a time.
func (t *Tx) ImageSigners(tenant string, p Page) ([]ImageSigner, string, error) {
	var prefix []byte
	if tenant != "" {
		prefix = []byte(tenant + "\x00")
	}
	var out []ImageSigner
	next, err := t.scan(bucketImageSigners, prefix, p, func(k, v []byte) (func(), error) {
		var s ImageSigner
		if err := decode(bucketImageSigners, k, v, &s); err != nil {
			return nil, err
		}
		return func() { out = append(out, s) }, nil
	})
	return out, next, err
}
