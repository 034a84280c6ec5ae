package session

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/quic-go/quic-go"
)

// maxCommands is how many command streams the registry may have open at once.
const maxCommands = 16

// acceptCommands serves each command stream the registry opens, until the connection
// ends. Commands keep running when it does: a resend after the reconnect attaches to
// them.
func (a *Agent) acceptCommands(ctx context.Context, conn *quic.Conn) {
	for {
		stream, err := conn.AcceptStream(conn.Context())
		if err != nil {
			return
		}
		a.wg.Go(func() { a.serveCommand(ctx, stream) })
	}
}

// serveCommand reads one command, runs it (or waits for the run of the same id) and
// answers its result on the same stream.
func (a *Agent) serveCommand(ctx context.Context, stream *quic.Stream) {
	stream.SetReadDeadline(time.Now().Add(ioTimeout))
	m, err := proto.ReadMessage(stream)
	if err == nil && m.Type != proto.MsgCommand {
		err = proto.Errorf(proto.InvalidInput, "a command stream starts with a command, not %q", m.Type)
	}
	if err != nil {
		a.log.Debug("command stream", "err", err)
		stream.CancelRead(quic.StreamErrorCode(codeProtocol))
		stream.CancelWrite(quic.StreamErrorCode(codeProtocol))
		return
	}
	res, ok := a.cmds.do(ctx, *m.Command, a.cfg.Handlers)
	if !ok {
		// The agent is stopping: no answer, so the registry resends the command to the
		// agent's next run instead of recording a cancellation.
		stream.CancelWrite(quic.StreamErrorCode(codeProtocol))
		return
	}
	stream.SetWriteDeadline(time.Now().Add(ioTimeout))
	proto.WriteMessage(stream, &proto.Message{Type: proto.MsgResult, Result: &res})
	stream.Close()
}

// commands runs relayed commands at most once per id, and remembers the results of the
// most recent ones.
type commands struct {
	mu   sync.Mutex
	runs map[string]*run
	done []string // ids of finished runs, oldest first
	keep int
}

// run is one command's execution: done closes when res is set.
type run struct {
	done chan struct{}
	res  proto.Result
	ok   bool
}

func (c *commands) init(keep int) {
	c.runs = map[string]*run{}
	c.keep = keep
}

// do returns the result of cmd: remembered, awaited from the run under way, or from a
// new run. ok is false when ctx ended before a result.
func (c *commands) do(ctx context.Context, cmd proto.Command, handlers map[string]Handler) (res proto.Result, ok bool) {
	c.mu.Lock()
	r, attach := c.runs[cmd.ID]
	if !attach {
		r = &run{done: make(chan struct{})}
		c.runs[cmd.ID] = r
	}
	c.mu.Unlock()
	if !attach {
		r.res = execute(ctx, cmd, handlers)
		r.ok = ctx.Err() == nil
		c.mu.Lock()
		if r.ok {
			c.done = append(c.done, cmd.ID)
			for len(c.done) > c.keep {
				delete(c.runs, c.done[0])
				c.done = c.done[1:]
			}
		} else {
			delete(c.runs, cmd.ID)
		}
		c.mu.Unlock()
		close(r.done)
	}
	select {
	case <-r.done:
		return r.res, r.ok
	case <-ctx.Done():
		return proto.Result{}, false
	}
}

// execute runs cmd's handler and makes its result.
func execute(ctx context.Context, cmd proto.Command, handlers map[string]Handler) proto.Result {
	res := proto.Result{ID: cmd.ID}
	h := handlers[cmd.Kind]
	if h == nil {
		res.Error = proto.Errorf(proto.Unsupported, "this agent has no handler for command kind %q", cmd.Kind)
		return res
	}
	out, err := h(ctx, cmd.Payload)
	switch {
	case err != nil:
		res.Error = agentError(cmd.Kind, err)
	case len(out) > 0 && !json.Valid(out):
		res.Error = proto.Errorf(proto.DriverError, "%s: the handler's result is not JSON", cmd.Kind)
	default:
		res.Result = out
	}
	return res
}

// agentError is err as it reaches the registry: its own code if it is a *proto.Error,
// else DRIVER_ERROR (the agent's work failed), prefixed with what failed.
func agentError(what string, err error) *proto.Error {
	if e, ok := errors.AsType[*proto.Error](err); ok {
		return e
	}
	return proto.Errorf(proto.DriverError, "%s: %v", what, err)
}
