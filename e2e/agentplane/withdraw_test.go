package agentplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
)

// siteRuns is a site agent's handler of commands that run until they are released or
// their context ends: it remembers which commands reached it, the timeout each was given
// (its context's deadline, from when it started), and which ended by their context.
type siteRuns struct {
	gate
	mu        sync.Mutex
	started   map[string]time.Duration // id (the payload) -> the time its context had left
	cancelled map[string]error         // id -> its context's error
}

func newSiteRuns() *siteRuns {
	r := &siteRuns{started: map[string]time.Duration{}, cancelled: map[string]error{}}
	r.init()
	return r
}

func (r *siteRuns) handle(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
	var id string
	json.Unmarshal(p, &id)
	left := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	r.mu.Lock()
	r.started[id] = left
	r.mu.Unlock()
	r.gate.mu.Lock()
	r.in++
	open := r.open
	r.gate.mu.Unlock()
	select {
	case <-open:
		return p, nil
	case <-ctx.Done():
		r.gate.mu.Lock()
		r.in--
		r.gate.mu.Unlock()
		r.mu.Lock()
		r.cancelled[id] = ctx.Err()
		r.mu.Unlock()
		return nil, ctx.Err()
	}
}

// ran reports whether command id reached the agent, and the time its context had left
// then (-1 for none).
func (r *siteRuns) ran(id string) (left time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	left, ok = r.started[id]
	return left, ok
}

// ended is the error the context of command id's handler ended with, nil while it runs.
func (r *siteRuns) ended(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancelled[id]
}

// startSite runs a site agent of e whose "power" commands siteRuns handles.
func startSite(e *env, r *siteRuns) {
	e.startAgent("site-1", func(c *session.Config) { c.Handlers = map[string]session.Handler{"power": r.handle} })
}

// power is a command of tenant beta's, named id (its payload too), with a step timeout.
func power(id string, timeoutSeconds int64) proto.Command {
	return proto.Command{ID: id, Kind: "power", Tenant: "beta", Payload: raw(`"` + id + `"`), TimeoutSeconds: timeoutSeconds}
}

// holdShare relays beta's whole share of the site's command slots, which hang, named
// prefix-0, prefix-1..., and waits until they all run at the agent; the answers come on
// the returned channel.
func holdShare(t *testing.T, e *env, r *siteRuns, prefix string) <-chan relayAnswer {
	t.Helper()
	answers := make(chan relayAnswer, proto.TenantCommandShare)
	for i := range proto.TenantCommandShare {
		go func() {
			res, err := e.ep.Relay(context.Background(), "site-1", proto.RoleNode, power(fmt.Sprintf("%s-%d", prefix, i), 0))
			answers <- relayAnswer{res, err}
		}()
	}
	waitFor(t, "beta's share to run", func() bool { return r.inside() == proto.TenantCommandShare })
	return answers
}

// wantAnswered checks that n answers come, each the command's payload.
func wantAnswered(t *testing.T, answers <-chan relayAnswer, n int) {
	t.Helper()
	for range n {
		if a := <-answers; a.err != nil {
			t.Fatalf("a held command: %v", a.err)
		}
	}
}

// runOne relays cmd through e, lets it finish once it runs at the agent, and checks its
// answer.
func runOne(t *testing.T, e *env, r *siteRuns, cmd proto.Command) {
	t.Helper()
	answer := relayInBackground(e.ep, "site-1", cmd)
	waitFor(t, cmd.ID+" to run at the site", func() bool { _, ran := r.ran(cmd.ID); return ran })
	r.release()
	if a := <-answer; a.err != nil || string(a.res) != string(cmd.Payload) {
		t.Fatalf("%s: answered %s, %v", cmd.ID, a.res, a.err)
	}
}

// wantNeverSent frees beta's share (held, holdShare's answers) and checks that the
// command id held back behind it never reaches the site: another command of beta's runs
// once the share is free, which id would have been sent before.
func wantNeverSent(t *testing.T, e *env, r *siteRuns, held <-chan relayAnswer, id string) {
	t.Helper()
	r.release()
	wantAnswered(t, held, proto.TenantCommandShare)
	runOne(t, e, r, power(id+"-next", 0))
	if _, ran := r.ran(id); ran {
		t.Errorf("%s, held back and answered without the agent, reached the site", id)
	}
}

// commandStored reads command id of node from e's store.
func commandStored(e *env, node, id string) (c store.AgentCommand, err error) {
	err = e.st.View(func(tx *store.Tx) (err error) { c, err = tx.AgentCommand(node, id); return err })
	return c, err
}

// siteEnv is an endpoint on bbolt with a site agent whose "power" commands r handles.
func siteEnv(t *testing.T) (*env, *siteRuns) {
	e := newEnv(t, agents.Config{})
	r := newSiteRuns()
	startSite(e, r)
	t.Cleanup(r.release)
	waitFor(t, "session", func() bool { return e.ep.Sessions() == 1 })
	return e, r
}

// TestHeldBackPastItsDeadline: a command of a tenant that holds its share of the site's
// command slots waits in the registry; once its step's timeout has passed it is answered
// TIMEOUT, saying it waited for the share, and never reaches the site, even when the
// share frees later.
func TestHeldBackPastItsDeadline(t *testing.T) {
	e, r := siteEnv(t)
	answers := holdShare(t, e, r, "first")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := e.ep.Relay(ctx, "site-1", proto.RoleNode, power("late", 1))
	if proto.CodeOf(err) != proto.Timeout || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "share") {
		t.Fatalf("a command held back past its deadline: %v, want TIMEOUT saying it waited for its tenant's share", err)
	}
	wantNeverSent(t, e, r, answers, "late")
	if c, err := commandStored(e, "site-1", "late"); err != nil || !c.Done || proto.CodeOf(c.Error) != proto.Timeout {
		t.Errorf("the command answered TIMEOUT is stored as %+v, %v; want it kept answered TIMEOUT", c, err)
	}
}

// TestSentAfterWaitingCarriesTheTimeLeft: a command held back for its tenant's share,
// sent once the share frees, carries the seconds left to its step's deadline, not its
// whole timeout: the site ends it when its step would. One that waited over two seconds
// of its 30 has less than its whole timeout left.
func TestSentAfterWaitingCarriesTheTimeLeft(t *testing.T) {
	e, r := siteEnv(t)
	answers := holdShare(t, e, r, "held")
	waited := relayInBackground(e.ep, "site-1", power("waited", 30))
	waitFor(t, "the command to wait over two seconds", func() bool {
		c, err := commandStored(e, "site-1", "waited")
		return err == nil && time.Since(c.CreatedAt) > 2*time.Second
	})
	r.release()
	wantAnswered(t, answers, proto.TenantCommandShare)
	waitFor(t, "the waiting command to run", func() bool { _, ran := r.ran("waited"); return ran })
	r.release()
	if a := <-waited; a.err != nil {
		t.Fatalf("the command that waited: %v", a.err)
	}
	// Sent with its full timeout, it would run with 30 s left (29.99 s as the handler reads
	// it). The bound leaves a second to the registry's rounding up and to the clock the
	// store stamped the command with, which the test reads back as wall time.
	if left, _ := r.ran("waited"); left < 0 || left > 29*time.Second {
		t.Errorf("the command that waited over 2 s of its 30 s ran with %v left, want at most 29 s", left)
	}
}

// TestWithdrawnCommandEnds: a caller whose context ends with a *proto.Error cause (a
// workflow's step that timed out, or was cancelled) withdraws its command: Relay answers
// that error, the agent's handler sees its context cancelled, the command's slot is free
// again (the agent runs its whole maxCommands at once), and the command stays stored
// answered with that error, which a later relay of its id gets, and nothing pending. With
// etcd, the replica that withdraws the command is not the one holding the agent's
// session: that one hears of it through the store.
func TestWithdrawnCommandEnds(t *testing.T) {
	t.Run("bbolt", func(t *testing.T) {
		e := newEnv(t, agents.Config{})
		withdrawnCommandEnds(t, e, e)
	})
	t.Run("etcd", func(t *testing.T) {
		r := etcdReplicas(t, 2)
		withdrawnCommandEnds(t, r[0], r[1])
	})
}

func withdrawnCommandEnds(t *testing.T, holder, driver *env) {
	r := newSiteRuns()
	startSite(holder, r)
	t.Cleanup(r.release)
	waitFor(t, "session", func() bool { return holder.ep.Sessions() == 1 })

	for name, why := range map[string]*proto.Error{
		"timed-out": proto.Errorf(proto.Timeout, "the step's timeout ran out"),
		"cancelled": proto.Errorf(proto.InvalidState, "the workflow was cancelled").WithReason(proto.ReasonCancelled),
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		answer := make(chan error, 1)
		go func() {
			_, err := driver.ep.Relay(ctx, "site-1", proto.RoleNode, power(name, 0))
			answer <- err
		}()
		waitFor(t, name+" to run at the site", func() bool { _, ran := r.ran(name); return ran })
		cancel(why)
		err := <-answer
		if e := proto.AsError(err); e.Code != why.Code || e.Details.Reason != why.Details.Reason || !strings.Contains(e.Message, "withdrawn") {
			t.Errorf("%s: Relay returned %v, want %s (reason %q) saying the command was withdrawn", name, err, why.Code, why.Details.Reason)
		}
		waitFor(t, name+"'s handler to see its context end", func() bool { return r.ended(name) != nil })
		if got := r.ended(name); !errors.Is(got, context.Canceled) {
			t.Errorf("%s: the handler's context ended with %v, want cancelled", name, got)
		}
		for _, e := range []*env{holder, driver} {
			if c, err := commandStored(e, "site-1", name); err != nil || !c.Done || proto.CodeOf(c.Error) != why.Code {
				t.Errorf("%s: the withdrawn command is stored as %+v, %v; want it kept answered %s", name, c, err, why.Code)
			}
		}
		if a := <-relayInBackground(driver.ep, "site-1", power(name, 0)); proto.CodeOf(a.err) != why.Code {
			t.Errorf("%s asked again once withdrawn: %s, %v; want the withdrawal (%s)", name, a.res, a.err, why.Code)
		}
	}
	// The withdrawn commands' streams ended: the agent takes maxCommands commands at once.
	answers := make(chan relayAnswer, maxCommands)
	for i := range maxCommands {
		go func() {
			cmd := power(fmt.Sprintf("free-%d", i), 0)
			cmd.Tenant = "" // no tenant's share bounds them
			res, err := driver.ep.Relay(context.Background(), "site-1", proto.RoleNode, cmd)
			answers <- relayAnswer{res, err}
		}()
	}
	waitFor(t, "every command slot to run a command", func() bool { return r.inside() == maxCommands })
	r.release()
	wantAnswered(t, answers, maxCommands)

}

// TestWithdrawnWhileHeldBackIsNeverSent: a command withdrawn while it waits for its
// tenant's share is never sent, even once the share frees.
func TestWithdrawnWhileHeldBackIsNeverSent(t *testing.T) {
	e, r := siteEnv(t)
	held := holdShare(t, e, r, "held")
	ctx, cancel := context.WithCancelCause(context.Background())
	answer := make(chan error, 1)
	go func() { _, err := e.ep.Relay(ctx, "site-1", proto.RoleNode, power("held-back", 0)); answer <- err }()
	waitFor(t, "the command to be stored", func() bool { _, err := commandStored(e, "site-1", "held-back"); return err == nil })
	cancel(proto.Errorf(proto.InvalidState, "the workflow was cancelled").WithReason(proto.ReasonCancelled))
	if err := <-answer; proto.AsError(err).Details.Reason != proto.ReasonCancelled {
		t.Errorf("withdrawn while held back: %v", err)
	}
	wantNeverSent(t, e, r, held, "held-back")
}

// TestCallerThatStopsLeavesTheCommand: a caller whose context ends without a
// *proto.Error cause (a registry stopping, a workflow's claim taken by another replica)
// leaves its command pending and running at the agent: the next Relay of its id gets
// its one answer.
func TestCallerThatStopsLeavesTheCommand(t *testing.T) {
	e, r := siteEnv(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("another registry drives the workflow now"))
	if _, err := e.ep.Relay(ctx, "site-1", proto.RoleNode, power("kept", 0)); proto.CodeOf(err) != proto.Timeout {
		t.Errorf("a caller that stopped: %v, want TIMEOUT", err)
	}
	waitFor(t, "kept to run at the site", func() bool { _, ran := r.ran("kept"); return ran })
	again := relayInBackground(e.ep, "site-1", power("kept", 0))
	r.release()
	if a := <-again; a.err != nil || string(a.res) != `"kept"` || r.ended("kept") != nil {
		t.Errorf("the command its caller left: answered %s, %v; its handler's context ended with %v", a.res, a.err, r.ended("kept"))
	}
}
