package session

import (
	"context"
	"fmt"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// SecretTimeout bounds Secret: the wait for a session, and then for the registry's
// answer.
const SecretTimeout = 10 * time.Second

// Secret asks the registry for the secret ref on the session stream and waits for its
// answer. The registry hands a node agent only the secrets its NodeSpec's host units name
// (docs/agent-plane.md); its refusal is returned as the *proto.Error it sent. Without a
// session, Secret waits for one up to SecretTimeout and then fails with INVALID_STATE; a
// session that ends before the answer fails it too, and the caller asks again later (the
// host converger on its next pass). The value is never logged.
func (a *Agent) Secret(ctx context.Context, ref string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, SecretTimeout)
	defer cancel()
	answer := make(chan proto.Secret, 1)
	id, err := a.requestSecret(ctx, ref, answer)
	if err != nil {
		return nil, err
	}
	defer a.forgetSecret(id)
	select {
	case ans := <-answer:
		if ans.Error != nil {
			return nil, ans.Error
		}
		return ans.Value, nil
	case <-ctx.Done():
		return nil, proto.Errorf(proto.Timeout, "the registry did not answer the request for %s: %w", ref, ctx.Err())
	}
}

// requestSecret sends a secretRequest for ref once there is a session, and returns the
// request's id; answer gets the registry's answer, or the error of a session that ended
// first.
func (a *Agent) requestSecret(ctx context.Context, ref string, answer chan proto.Secret) (string, error) {
	for {
		a.mu.Lock()
		if a.stream != nil {
			a.secretSeq++
			id := fmt.Sprintf("secret-%d", a.secretSeq)
			a.secretCalls[id] = answer
			a.sendLocked(&proto.Message{Type: proto.MsgSecretRequest, SecretRequest: &proto.SecretRequest{ID: id, Ref: ref}})
			a.mu.Unlock()
			return id, nil
		}
		up := a.up
		a.mu.Unlock()
		select {
		case <-up:
		case <-ctx.Done():
			return "", proto.Errorf(proto.InvalidState, "bcd has no session with the registry to fetch %s over: %w", ref, ctx.Err())
		}
	}
}

// forgetSecret drops a request that is answered or given up.
func (a *Agent) forgetSecret(id string) {
	a.mu.Lock()
	delete(a.secretCalls, id)
	a.mu.Unlock()
}

// secretAnswered hands the registry's answer to the request that waits for it; an answer
// to a request given up is dropped.
func (a *Agent) secretAnswered(ans proto.Secret) {
	a.mu.Lock()
	ch := a.secretCalls[ans.ID]
	delete(a.secretCalls, ans.ID)
	a.mu.Unlock()
	if ch != nil {
		ch <- ans
	}
}

// sessionEndedLocked fails the secret requests of a session that ended; a.mu is held.
func (a *Agent) sessionEndedLocked() {
	for id, ch := range a.secretCalls {
		ch <- proto.Secret{ID: id, Error: proto.Errorf(proto.InvalidState, "the session with the registry ended before it answered")}
		delete(a.secretCalls, id)
	}
	a.up = make(chan struct{})
}
