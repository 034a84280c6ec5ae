package session

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// CallTimeout bounds a request to the registry on the session stream (Secret, Renew):
// the wait for a session, and then for the registry's answer.
const CallTimeout = 10 * time.Second

// call sends the request that ask makes for a fresh id once there is a session, and
// returns the message that answers it. what names the request in errors. Without a
// session, call waits for one up to CallTimeout and then fails with INVALID_STATE; a
// session that ends before the answer fails it too, and the caller asks again later. A
// session the registry ended by refusing the agent's certificate for good (CloseRevoked:
// the hello, or any exchange since, refused) fails it FORBIDDEN with the registry's
// reason, as asking again would be refused the same way.
func (a *Agent) call(ctx context.Context, what string, ask func(id string) *proto.Message) (*proto.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	answer := make(chan callResult, 1)
	id, err := a.request(ctx, what, ask, answer)
	if err != nil {
		return nil, err
	}
	defer a.forget(id)
	select {
	case r := <-answer:
		if r.m != nil {
			return r.m, nil
		}
		if code, reason := closedBy(r.ended); code == proto.CloseRevoked {
			reason, _ = strings.CutPrefix(reason, string(proto.Forbidden)+": ")
			return nil, proto.Errorf(proto.Forbidden, "the registry refused this agent's certificate before it answered the request to %s: %s", what, reason)
		}
		return nil, proto.Errorf(proto.InvalidState, "the session with the registry ended before it answered the request to %s", what)
	case <-ctx.Done():
		return nil, proto.Errorf(proto.Timeout, "the registry did not answer the request to %s: %w", what, ctx.Err())
	}
}

// callResult is what a request waits for: the registry's answer m, or, when the session
// ended first, how it ended (connect's error).
type callResult struct {
	m     *proto.Message
	ended error
}

// request sends ask's message once there is a session, and returns its id; answer gets
// the registry's answer, or how the session ended when it ends first.
func (a *Agent) request(ctx context.Context, what string, ask func(id string) *proto.Message, answer chan callResult) (string, error) {
	for {
		a.mu.Lock()
		if a.stream != nil {
			a.callSeq++
			id := fmt.Sprintf("call-%d", a.callSeq)
			a.calls[id] = answer
			a.sendLocked(ask(id))
			a.mu.Unlock()
			return id, nil
		}
		up := a.up
		a.mu.Unlock()
		select {
		case <-up:
		case <-ctx.Done():
			return "", proto.Errorf(proto.InvalidState, "bcd has no session with the registry to %s over: %w", what, ctx.Err())
		}
	}
}

// forget drops a request that is answered or given up.
func (a *Agent) forget(id string) {
	a.mu.Lock()
	delete(a.calls, id)
	a.mu.Unlock()
}

// answered hands the registry's answer m, to the request id, to the request that waits
// for it; an answer to a request given up is dropped.
func (a *Agent) answered(id string, m *proto.Message) {
	a.mu.Lock()
	ch := a.calls[id]
	delete(a.calls, id)
	a.mu.Unlock()
	if ch != nil {
		ch <- callResult{m: m}
	}
}

// sessionEndedLocked fails the requests of a session that ended with err (connect's);
// a.mu is held.
func (a *Agent) sessionEndedLocked(err error) {
	for id, ch := range a.calls {
		ch <- callResult{ended: err}
		delete(a.calls, id)
	}
	a.up = make(chan struct{})
}
