package attest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/json"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
)

// VerifyResult checks that sr is signed by the private half of pub and that its payload
// answers want: its version, node, command id and kind. It returns the payload. Every
// refusal is a *proto.Error with code FORBIDDEN and details.reason saying which check failed
// (algorithm, signature, payload, version, node, command, kind).
func VerifyResult(pub crypto.PublicKey, sr proto.SignedResult, want proto.ResultWant) (proto.ResultPayload, error) {
	refuse := func(reason, format string, a ...any) (proto.ResultPayload, error) {
		return proto.ResultPayload{}, proto.Errorf(proto.Forbidden, "signed result: "+format, a...).WithReason(reason)
	}
	if len(sr.Payload) > proto.MaxResultPayload {
		return refuse("payload", "the payload is %d bytes, more than %d", len(sr.Payload), proto.MaxResultPayload)
	}
	msg := proto.SignedMessage(sr.Payload)
	switch k := pub.(type) {
	case ed25519.PublicKey:
		if sr.Algorithm != proto.SigEd25519 {
			return refuse("algorithm", "the algorithm is %q, but the certificate's key is Ed25519", sr.Algorithm)
		}
		if !ed25519.Verify(k, msg, sr.Signature) {
			return refuse("signature", "the signature does not verify with the agent certificate's key")
		}
	case *ecdsa.PublicKey:
		if sr.Algorithm != proto.SigECDSAP256 || k.Curve != elliptic.P256() {
			return refuse("algorithm", "the algorithm is %q, but the certificate's key is ECDSA on %s", sr.Algorithm, k.Curve.Params().Name)
		}
		digest := sha256.Sum256(msg)
		if !ecdsa.VerifyASN1(k, digest[:], sr.Signature) {
			return refuse("signature", "the signature does not verify with the agent certificate's key")
		}
	default:
		return refuse("algorithm", "an agent key is ECDSA P-256 or Ed25519, not %s", proto.KeyAlgorithm(pub))
	}
	var p proto.ResultPayload
	if err := (jsondoc.Decoder{Name: "the signed payload", Limits: jsondoc.Limits{MaxBytes: proto.MaxResultPayload, MaxDepth: jsondoc.DefaultLimits.MaxDepth}}).Decode(sr.Payload, &p); err != nil {
		return refuse("payload", "the payload is not a result payload: %v", err)
	}
	switch {
	case p.Version != proto.ResultPayloadVersion:
		return refuse("version", "payload version %d; this registry reads version %d", p.Version, proto.ResultPayloadVersion)
	case p.NodeID != want.NodeID:
		return refuse("node", "signed for node %q, not %q", p.NodeID, want.NodeID)
	case p.CommandID != want.CommandID:
		return refuse("command", "signed for command %q, not %q: a result of another step or attempt", p.CommandID, want.CommandID)
	case p.Kind != want.Kind:
		return refuse("kind", "signed as a %q result, not %q", p.Kind, want.Kind)
	case len(p.Result) == 0 || !json.Valid(p.Result):
		return refuse("payload", "the payload carries no result")
	}
	return p, nil
}
