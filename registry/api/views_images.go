package api

import (
	"bytes"
	"encoding/base64"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/store"
)

// Image is a catalog image as the API shows it.
type Image struct {
	ID          string            `json:"id"`
	Tenant      string            `json:"tenantId"`
	Ref         string            `json:"ref"`
	Kind        proto.ImageKind   `json:"kind"`
	Format      proto.ImageFormat `json:"format"`
	Compression proto.Compression `json:"compression"`
	// SHA256 is the digest of the artifact as stored, 64 hex digits.
	SHA256 string `json:"sha256"`
	// SizeBytes is the artifact's size; absent when it was registered without one.
	SizeBytes int64  `json:"sizeBytes,omitempty"`
	Source    string `json:"source"`
	// SignerID and Signature are the image's signature, when it has one.
	SignerID  string `json:"signerId,omitempty"`
	Signature string `json:"signature,omitempty"`
	// SignerTenant is the tenant whose allowlist held the signer.
	SignerTenant string `json:"signerTenantId,omitempty"`
	// Verified says that the signature verified at registration.
	Verified   bool      `json:"verified"`
	Public     bool      `json:"public"`
	CreatedAt  time.Time `json:"createdAt"`
	PromotedAt time.Time `json:"promotedAt,omitzero"`
}

// ImageSigner is a key on a tenant's (or the platform's) signer allowlist.
type ImageSigner struct {
	Tenant string `json:"tenantId"`
	ID     string `json:"id"`
	// Algorithm is ed25519 or ecdsa-p256-sha256.
	Algorithm string `json:"algorithm"`
	// PublicKey is the signer's SPKI PEM.
	PublicKey   string        `json:"publicKey"`
	Fingerprint string        `json:"fingerprint"`
	AddedAt     time.Time     `json:"addedAt"`
	RevokedAt   time.Time     `json:"revokedAt,omitzero"`
	History     []SignerEvent `json:"history"`
}

// SignerEvent is one change of a signer: added, revoked or re-added.
type SignerEvent struct {
	Event string    `json:"event"`
	At    time.Time `json:"at"`
}

// LowSSignature is a base64 signature as the catalog takes it: a DER ECDSA P-256
// signature with a high S (openssl dgst -sign writes one about half the time) becomes
// its low-S twin; any other, or text that is no signature, stays as it is.
func LowSSignature(b64 string) string {
	sig, err := image.DecodeSignature(b64)
	if b64 == "" || err != nil {
		return b64
	}
	if low := image.LowS(sig); !bytes.Equal(low, sig) {
		return base64.StdEncoding.EncodeToString(low)
	}
	return b64
}

func imageOf(i store.Image) Image { return Image(i) }

func signerOf(s store.ImageSigner) ImageSigner {
	v := ImageSigner{Tenant: s.Tenant, ID: s.ID, Algorithm: s.Algorithm, PublicKey: s.PublicKey, Fingerprint: s.Fingerprint,
		AddedAt: s.AddedAt, RevokedAt: s.RevokedAt}
	if s.History != nil {
		v.History = make([]SignerEvent, 0, len(s.History))
	}
	for _, e := range s.History {
		v.History = append(v.History, SignerEvent(e))
	}
	return v
}
