package agents

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// secret answers an agent's secretRequest on its session stream with what Config.Secret
// gives the agent: the value, or the error. The request and its outcome are logged, the
// value never. A write that fails ends the session, as a failed push does; the agent
// asks again on its next session.
func (e *Endpoint) secret(s *session, req *proto.SecretRequest) error {
	ans := proto.Secret{ID: req.ID}
	var err error
	if e.cfg.Secret == nil {
		err = proto.Errorf(proto.Unsupported, "this registry hands out no secrets")
	} else {
		ans.Value, err = e.cfg.Secret(s.node, s.role, req.Ref)
		if err == nil && len(ans.Value) == 0 {
			err = proto.Errorf(proto.Internal, "secret %s is empty", req.Ref)
		}
	}
	switch {
	case err != nil && proto.CodeOf(err) == proto.Internal:
		e.log.Error("agent secret request", "node", s.node, "role", s.role, "ref", req.Ref, "err", err)
		ans.Value, ans.Error = nil, proto.Errorf(proto.Internal, "internal error: the registry's log has the details")
	case err != nil:
		ans.Value, ans.Error = nil, proto.AsError(err)
		e.log.Warn("agent secret request refused", "node", s.node, "role", s.role, "ref", req.Ref, "code", ans.Error.Code, "reason", ans.Error.Message)
	default:
		e.log.Info("agent secret request", "node", s.node, "role", s.role, "ref", req.Ref, "code", "OK")
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.stream.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := proto.WriteMessage(s.stream, &proto.Message{Type: proto.MsgSecret, Secret: &ans}); err != nil {
		s.conn.CloseWithError(codeProtocol, "secret answer failed")
		return err
	}
	return nil
}
