package api

import (
	"context"

	"github.com/better-compute/better-compute/proto/joinwire"
)

// Joiner admits an agent: the registry's JoinService.
type Joiner interface {
	Join(ctx context.Context, req joinwire.Request) (joinwire.Response, error)
}

// RegisterJoin adds join.join, the one method called without a credential: the sealed
// join token in its body authenticates it. Its body is at most joinwire.MaxRequest bytes.
func (s *Server) RegisterJoin(j Joiner) {
	s.Register(joinwire.JoinMethod, Method{Public: true, MaxBody: joinwire.MaxRequest, Call: typed(func(ctx context.Context, _ *Caller, req joinwire.Request) (joinwire.Response, error) {
		return j.Join(ctx, req)
	})})
}
