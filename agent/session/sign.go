package session

import (
	"context"
	"crypto"
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
)

// agentKey keys the Agent in the contexts its handlers run with.
type agentKey struct{}

// SignResult signs result (marshalled as JSON) as the node-signed result of the command
// ctx runs, of kind kind: with the agent's own key, for its node id and the command's
// id, the certificate that certifies the key beside it (proto.SignResult). The handler
// returns what it gives as its result. Outside a command's handler it fails.
func SignResult(ctx context.Context, kind string, result any) (json.RawMessage, error) {
	a, ok := ctx.Value(agentKey{}).(*Agent)
	r, running := ctx.Value(cmdKey{}).(*run)
	if !ok || !running {
		return nil, proto.Errorf(proto.Internal, "a %s result is signed only while its command runs", kind)
	}
	body, err := proto.Marshal(result)
	if err != nil {
		return nil, err
	}
	cert := a.certificate()
	signer, ok := cert.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, proto.Errorf(proto.Internal, "the agent's key (%s) cannot sign", proto.KeyAlgorithm(cert.PrivateKey))
	}
	sr, err := proto.SignResult(signer, proto.ResultPayload{NodeID: a.node, CommandID: r.id, Kind: kind, Time: a.cfg.Clock.Now(), Result: body})
	if err != nil {
		return nil, err
	}
	sr.Certificate = cert.Certificate[0]
	return proto.Marshal(sr)
}
