package session

import (
	"context"

	"github.com/better-compute/better-compute/proto"
)

// Secret asks the registry for the secret ref on the session stream and waits for its
// answer. The registry hands a node agent only the secrets its NodeSpec's host units name
// (docs/agent-plane.md); its refusal is returned as the *proto.Error it sent. Without a
// session, or when the session ends first, it fails as call says, and the caller asks
// again later (the host converger on its next pass). The value is never logged.
func (a *Agent) Secret(ctx context.Context, ref string) ([]byte, error) {
	m, err := a.call(ctx, "fetch "+ref, func(id string) *proto.Message {
		return &proto.Message{Type: proto.MsgSecretRequest, SecretRequest: &proto.SecretRequest{ID: id, Ref: ref}}
	})
	if err != nil {
		return nil, err
	}
	if m.Secret.Error != nil {
		return nil, m.Secret.Error
	}
	return m.Secret.Value, nil
}
