package api

import (
	"context"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
)

// Joiner admits an agent: the registry's JoinService. from is the address the join
// came from (Caller.Source).
type Joiner interface {
	Join(ctx context.Context, from string, req joinwire.Request) (joinwire.Response, error)
}

// RegisterJoin adds join.join, the one method called without a credential: the sealed
// join token in its body authenticates it. Its body is at most joinwire.MaxRequest bytes,
// and a refused token costs its source address a failed check (FailureLimits).
func (s *Server) RegisterJoin(j Joiner) {
	s.Register(joinwire.JoinMethod, Method{Public: true, MaxBody: joinwire.MaxRequest, RefusedToken: tokenRefused,
		Call: typed(func(ctx context.Context, c *Caller, req joinwire.Request) (joinwire.Response, error) {
			return j.Join(ctx, c.Source, req)
		})})
}

// tokenRefused reports whether a join's error refused its token: sealed to another key,
// node, role or agent key, malformed, unknown, used or expired (UNAUTHENTICATED), of
// another role or node, or of a revoked identity (FORBIDDEN), or naming a site that is
// gone (NOT_FOUND). A malformed request (INVALID_INPUT) never reached its token, and a
// registry that failed (INTERNAL, UNAVAILABLE, TIMEOUT) did not refuse it.
func tokenRefused(err error) bool {
	switch proto.CodeOf(err) {
	case proto.Unauthenticated, proto.Forbidden, proto.NotFound:
		return true
	}
	return false
}
