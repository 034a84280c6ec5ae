package agents

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// secret answers an agent's secretRequest on its session stream with what Config.Secret
// gives the agent, once its certificate is checked again (store.Tx.CheckAgent: a session
// of an earlier installation gets nothing): the value, or the error. A request served is
// logged with its ref, a refusal as refusal logs it, its ref cut short (proto.Quote: the
// agent sends whatever ref it likes, up to its frame); the value never. A write that
// fails ends the session, as a failed push does; the agent asks again on its next
// session.
func (e *Endpoint) secret(s *session, req *proto.SecretRequest) error {
	ans := proto.Secret{ID: req.ID}
	var err error
	if e.cfg.Secret == nil {
		err = proto.Errorf(proto.Unsupported, "this registry hands out no secrets")
	} else if err = e.current(s); err == nil {
		ans.Value, err = e.cfg.Secret(s.node, s.role, req.Ref)
		if err == nil && len(ans.Value) == 0 {
			err = proto.Errorf(proto.Internal, "secret %s is empty", req.Ref)
		}
	}
	if err != nil {
		ans.Value, ans.Error = nil, e.refusal(s, "agent secret request", err, "ref", proto.Quote(req.Ref))
	} else {
		e.log.Info("agent secret request", "node", s.node, "role", s.role, "ref", req.Ref, "code", "OK")
	}
	return e.answer(s, &proto.Message{Type: proto.MsgSecret, Secret: &ans})
}

// renew answers an agent's renewRequest with a certificate for its node, role and
// identity epoch and the key it sent, from Config.Renew, or the error.
func (e *Endpoint) renew(s *session, req *proto.RenewRequest) error {
	ans := proto.Renewal{ID: req.ID}
	var err error
	if e.cfg.Renew == nil {
		err = proto.Errorf(proto.Unsupported, "this registry renews no certificates")
	} else {
		ans.Certificate, err = e.cfg.Renew(s.credential(), req.PublicKey)
	}
	if err != nil {
		ans.Certificate, ans.Error = nil, e.refusal(s, "agent certificate renewal", err)
	} else {
		e.log.Info("agent certificate renewed", "node", s.node, "role", s.role)
	}
	return e.answer(s, &proto.Message{Type: proto.MsgRenewal, Renewal: &ans})
}

// refusal logs an agent's request that failed with err and returns what the agent is
// told: err itself, or for an INTERNAL error only that the registry's log has the details.
// An INTERNAL error is the registry's, and logged each time; any other refusal is the
// agent's doing, which it may repeat as fast as its link carries its requests, and is
// logged as a warning at most once a minute for the agent and what (warnRefused).
func (e *Endpoint) refusal(s *session, what string, err error, attrs ...any) *proto.Error {
	if proto.CodeOf(err) == proto.Internal {
		e.log.Error(what, append([]any{"node", s.node, "role", s.role, "err", err}, attrs...)...)
		return proto.Errorf(proto.Internal, "internal error: the registry's log has the details")
	}
	pe := proto.AsError(err)
	e.warnRefused(s, what, what+" refused", pe, attrs...)
	return pe
}

// answer writes m on the session stream. A write that fails ends the session, as a
// failed push does; the agent asks again on its next session.
func (e *Endpoint) answer(s *session, m *proto.Message) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.stream.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := proto.WriteMessage(s.stream, m); err != nil {
		s.conn.CloseWithError(codeProtocol, string(m.Type)+" answer failed")
		return err
	}
	return nil
}
