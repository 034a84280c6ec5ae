package session

import (
	"context"
	"fmt"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// CallTimeout bounds a request to the registry on the session stream (Secret, Renew):
// the wait for a session, and then for the registry's answer.
const CallTimeout = 10 * time.Second

// call sends the request that ask makes for a fresh id once there is a session, and
// returns the message that answers it. what names the request in errors. Without a
// session, call waits for one up to CallTimeout and then fails with INVALID_STATE; a
// session that ends before the answer fails it too, and the caller asks again later.
func (a *Agent) call(ctx context.Context, what string, ask func(id string) *proto.Message) (*proto.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	answer := make(chan *proto.Message, 1)
	id, err := a.request(ctx, what, ask, answer)
	if err != nil {
		return nil, err
	}
	defer a.forget(id)
	select {
	case m := <-answer:
		if m == nil {
			return nil, proto.Errorf(proto.InvalidState, "the session with the registry ended before it answered the request to %s", what)
		}
		return m, nil
	case <-ctx.Done():
		return nil, proto.Errorf(proto.Timeout, "the registry did not answer the request to %s: %w", what, ctx.Err())
	}
}

// request sends ask's message once there is a session, and returns its id; answer gets
// the registry's answer, or nil when the session ends first.
func (a *Agent) request(ctx context.Context, what string, ask func(id string) *proto.Message, answer chan *proto.Message) (string, error) {
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
		ch <- m
	}
}

// sessionEndedLocked fails the requests of a session that ended; a.mu is held.
func (a *Agent) sessionEndedLocked() {
	for id, ch := range a.calls {
		ch <- nil
		delete(a.calls, id)
	}
	a.up = make(chan struct{})
}
