package session

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/quic-go/quic-go"
)

// maxCommands is how many command streams the registry may have open at once.
const maxCommands = proto.MaxAgentCommands

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
// answers its result on the same stream. A command whose handler asked for AfterReply
// runs that once the registry has read the result (it closes its end of the stream).
// While it runs, the registry's end of the stream is read (closed): a reset with
// proto.CloseWithdrawn withdraws the command, whose handler's context is cancelled
// (commands.withdraw); a stream or a connection that ends otherwise leaves it running,
// for the registry's resend to join.
//
// Every path ends both directions of the stream: QUIC counts a stream against the
// registry's maxCommands until the agent has finished sending (or reset) and finished
// receiving (read the registry's close, or stopped reading). One left half open is a
// command slot lost for the life of the connection.
func (a *Agent) serveCommand(ctx context.Context, stream *quic.Stream) {
	// Stops reading a stream whose command did not read; a no-op once the read below ended.
	defer stream.CancelRead(quic.StreamErrorCode(codeNormal))
	stream.SetReadDeadline(time.Now().Add(ioTimeout))
	m, err := proto.ReadMessage(stream)
	if err == nil && m.Type != proto.MsgCommand {
		err = proto.Errorf(proto.InvalidInput, "a command stream starts with a command, not %q", m.Type)
	}
	if err != nil {
		a.log.Debug("command stream", "err", err)
		stream.CancelWrite(quic.StreamErrorCode(codeProtocol))
		return
	}
	stream.SetReadDeadline(time.Time{})
	var closeErr error // how the registry's end ended, once closed is
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, closeErr = io.Copy(io.Discard, stream)
		if se, ok := errors.AsType[*quic.StreamError](closeErr); ok && se.Remote && se.ErrorCode == codeWithdrawn {
			a.log.Debug("command withdrawn by the registry", "command", m.Command.ID)
			a.cmds.withdraw(m.Command.ID)
		}
	}()
	// Ends the read above on every path, once the registry's close was read or not.
	defer func() { stream.CancelRead(quic.StreamErrorCode(codeNormal)); <-closed }()
	res, after, ok := a.cmds.do(ctx, *m.Command, a.cfg.Handlers, stream)
	if !ok {
		// The agent is stopping: no answer, so the registry resends the command to the
		// agent's next run instead of recording a cancellation.
		stream.CancelWrite(quic.StreamErrorCode(codeProtocol))
		return
	}
	stream.SetWriteDeadline(time.Now().Add(ioTimeout))
	if err := proto.WriteMessage(stream, &proto.Message{Type: proto.MsgResult, Result: &res}); err != nil {
		a.log.Debug("command result", "command", res.ID, "err", err)
		stream.CancelWrite(quic.StreamErrorCode(codeProtocol))
		// The registry resends the command: the answer that reaches it runs after.
		a.cmds.giveBack(res.ID, after)
		return
	}
	stream.Close()
	if after == nil {
		return
	}
	stream.SetReadDeadline(time.Now().Add(ioTimeout))
	if <-closed; closeErr != nil {
		a.log.Warn("the registry did not confirm the result; acting on it anyway", "command", res.ID, "err", closeErr)
	}
	after()
}

// cmdKey keys the command a handler's context runs.
type cmdKey struct{}

// ReportProgress sends detail (marshalled as JSON) as the progress of the command ctx
// runs, on the stream the registry waits on; outside a command's handler it does
// nothing. A report that cannot be sent is dropped: progress is advisory.
func ReportProgress(ctx context.Context, detail any) {
	r, ok := ctx.Value(cmdKey{}).(*run)
	if !ok {
		return
	}
	b, err := proto.Marshal(detail)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.out == nil {
		return
	}
	r.out.SetWriteDeadline(time.Now().Add(ioTimeout))
	proto.WriteMessage(r.out, &proto.Message{Type: proto.MsgProgress, Progress: &proto.Progress{ID: r.id, Detail: b}})
}

// AfterReply makes fn run once the registry has the result of the command ctx runs
// (boot.kexec answers before it replaces the running system). It runs at most once;
// outside a command's handler it does nothing.
func AfterReply(ctx context.Context, fn func()) {
	if r, ok := ctx.Value(cmdKey{}).(*run); ok {
		r.mu.Lock()
		r.after = fn
		r.mu.Unlock()
	}
}

// commands runs relayed commands at most once per id, and remembers the results of the
// most recent ones, by tenant (proto.Command.Tenant), so that a resend gets the result
// instead of a second run. Each tenant's last keep results are kept whatever the others
// run; past that, results are kept until the agent holds keptShares*keep of them, when
// the tenant holding the most (proto.HoldingMost) forgets its oldest. Nothing is
// forgotten for its age: the registry may resend a command until its housekeeping
// forgets it, a day or two after it was made.
type commands struct {
	mu   sync.Mutex
	runs map[string]*run
	done map[string][]string // ids of each tenant's finished runs, oldest first
	held map[string]int      // len of each tenant's done
	kept int                 // the ids done holds
	keep int
}

// keptShares bounds the results an agent keeps in all: keptShares times a tenant's own
// keep (4096 of the default 256), or keep for each tenant when more tenants hold that.
const keptShares = 16

// run is one command's execution: done closes when res is set.
type run struct {
	id   string
	done chan struct{}
	res  proto.Result
	ok   bool
	// ctx is the context the run's handler runs in, which withdraw cancels.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// mu guards out, the stream the registry waits on now (progress goes there), and
	// after, what AfterReply asked for (taken by the first answer delivered).
	mu    sync.Mutex
	out   *quic.Stream
	after func()
}

func (c *commands) init(keep int) {
	c.runs = map[string]*run{}
	c.done = map[string][]string{}
	c.held = map[string]int{}
	c.keep = keep
}

// remember keeps the result of tenant's finished run id, and forgets the oldest of the
// tenant holding the most while more than keptShares*keep are kept, never below a
// tenant's own keep. c.mu is held.
func (c *commands) remember(tenant, id string) {
	c.done[tenant] = append(c.done[tenant], id)
	c.held[tenant]++
	c.kept++
	for c.kept > keptShares*c.keep {
		most := proto.HoldingMost(c.held, tenant)
		if c.held[most] <= c.keep {
			return
		}
		delete(c.runs, c.done[most][0])
		c.done[most] = c.done[most][1:]
		c.held[most]--
		c.kept--
	}
}

// do returns the result of cmd: remembered, awaited from the run under way, or from a
// new run, and what to do once it is delivered. ok is false when ctx ended before a
// result. Progress of the run goes to out from now on.
func (c *commands) do(ctx context.Context, cmd proto.Command, handlers map[string]Handler, out *quic.Stream) (res proto.Result, after func(), ok bool) {
	c.mu.Lock()
	r, attach := c.runs[cmd.ID]
	if !attach {
		r = &run{id: cmd.ID, done: make(chan struct{})}
		r.ctx, r.cancel = context.WithCancelCause(context.WithValue(ctx, cmdKey{}, r))
		c.runs[cmd.ID] = r
	}
	c.mu.Unlock()
	r.mu.Lock()
	r.out = out
	r.mu.Unlock()
	if !attach {
		r.res = execute(r.ctx, cmd, handlers)
		r.cancel(nil)
		r.ok = ctx.Err() == nil
		c.mu.Lock()
		if r.ok {
			c.remember(cmd.Tenant, cmd.ID)
		} else {
			delete(c.runs, cmd.ID)
		}
		c.mu.Unlock()
		close(r.done)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return proto.Result{}, nil, false
	}
	if !r.ok {
		return proto.Result{}, nil, false
	}
	r.mu.Lock()
	after, r.after = r.after, nil
	r.mu.Unlock()
	return r.res, after, true
}

// errWithdrawn is the cause a run's context is cancelled with when the registry
// withdraws its command.
var errWithdrawn = errors.New("the registry withdrew the command: its step ended")

// withdraw cancels the handler of the run of command id, if it runs: the registry
// withdrew the command (proto.CloseWithdrawn).
func (c *commands) withdraw(id string) {
	c.mu.Lock()
	r := c.runs[id]
	c.mu.Unlock()
	if r != nil {
		r.cancel(errWithdrawn)
	}
}

// giveBack hands back the after-reply action of an answer that was not delivered, for
// the next answer of the same command to take.
func (c *commands) giveBack(id string, after func()) {
	if after == nil {
		return
	}
	c.mu.Lock()
	r := c.runs[id]
	c.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.after == nil {
		r.after = after
	}
}

// execute runs cmd's handler and makes its result, within what the registry takes of
// an answer (proto.Result.Bounded). A command that names a timeout (proto.Command.TimeoutSeconds)
// runs under it: a handler that ends by it with an error of its own is TIMEOUT.
func execute(ctx context.Context, cmd proto.Command, handlers map[string]Handler) proto.Result {
	res := proto.Result{ID: cmd.ID}
	h := handlers[cmd.Kind]
	if h == nil {
		res.Error = proto.Errorf(proto.Unsupported, "this agent has no handler for command kind %q", cmd.Kind)
		return res
	}
	return handle(ctx, cmd, h).Bounded(cmd.Kind)
}

// handle runs cmd's handler h and makes its result.
func handle(ctx context.Context, cmd proto.Command, h Handler) proto.Result {
	res := proto.Result{ID: cmd.ID}
	hctx := ctx
	if cmd.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, time.Duration(cmd.TimeoutSeconds)*time.Second)
		defer cancel()
	}
	out, err := h(hctx, cmd.Payload)
	_, coded := errors.AsType[*proto.Error](err)
	switch {
	case err != nil && !coded && context.Cause(ctx) == errWithdrawn:
		res.Error = proto.Errorf(proto.InvalidState, "%s was withdrawn by the registry before it finished: %v", cmd.Kind, err)
	case err != nil && !coded && ctx.Err() == nil && hctx.Err() != nil:
		res.Error = proto.Errorf(proto.Timeout, "%s did not finish within its step's timeout of %ds: %v", cmd.Kind, cmd.TimeoutSeconds, err)
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
