package session

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestExecute(t *testing.T) {
	handlers := map[string]Handler{
		"echo": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) { return p, nil },
		"plain": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			return nil, errors.New("disk busy")
		},
		"coded": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			return nil, proto.Errorf(proto.Timeout, "slow")
		},
		"garbage": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{`), nil
		},
		// An answer the registry does not take: refused or cut before it is sent.
		"huge": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`"` + strings.Repeat("a", proto.MaxStepResult-1) + `"`), nil
		},
		"verbose": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			return nil, errors.New(strings.Repeat("e", proto.MaxFrame))
		},
		// A BMC that never answers: the handler ends only with its context.
		"hang": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}
	cases := map[string]struct {
		cmd  proto.Command
		want proto.Result
	}{
		"result":       {cmd: proto.Command{ID: "1", Kind: "echo", Payload: json.RawMessage(`{"a":1}`)}, want: proto.Result{ID: "1", Result: json.RawMessage(`{"a":1}`)}},
		"plain error":  {cmd: proto.Command{ID: "2", Kind: "plain"}, want: proto.Result{ID: "2", Error: &proto.Error{Code: proto.DriverError, Message: "plain: disk busy"}}},
		"coded error":  {cmd: proto.Command{ID: "3", Kind: "coded"}, want: proto.Result{ID: "3", Error: &proto.Error{Code: proto.Timeout, Message: "slow"}}},
		"not json":     {cmd: proto.Command{ID: "4", Kind: "garbage"}, want: proto.Result{ID: "4", Error: &proto.Error{Code: proto.DriverError, Message: "garbage: the handler's result is not JSON"}}},
		"unknown kind": {cmd: proto.Command{ID: "5", Kind: "bogus"}, want: proto.Result{ID: "5", Error: &proto.Error{Code: proto.Unsupported, Message: `this agent has no handler for command kind "bogus"`}}},
		"past a step's result": {cmd: proto.Command{ID: "7", Kind: "huge"}, want: proto.Result{ID: "7", Error: proto.Errorf(proto.InvalidInput,
			"the agent's huge result takes 131073 bytes, more than the 131072 a step's result may: have the step answer less (a workflow run keeps its steps' results)").WithPath("result").WithReason(proto.ReasonTooLarge)}},
		"an error past its frame": {cmd: proto.Command{ID: "8", Kind: "verbose"}, want: proto.Result{ID: "8",
			Error: (&proto.Error{Code: proto.DriverError, Message: "verbose: " + strings.Repeat("e", proto.MaxFrame)}).Cut(proto.MaxErrorMessage)}},
		// A command ends by its step's timeout, and its stream with it.
		"past its timeout": {cmd: proto.Command{ID: "6", Kind: "hang", TimeoutSeconds: 1},
			want: proto.Result{ID: "6", Error: &proto.Error{Code: proto.Timeout, Message: "hang did not finish within its step's timeout of 1s: context deadline exceeded"}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := execute(context.Background(), tc.cmd, handlers)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreUnexported(proto.Error{})); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCommandsRunOncePerID(t *testing.T) {
	var runs atomic.Int32
	started, release := make(chan struct{}, 8), make(chan struct{})
	handlers := map[string]Handler{
		"slow": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			runs.Add(1)
			started <- struct{}{}
			<-release
			return p, nil
		},
	}
	var c commands
	c.init(2)
	ctx := context.Background()
	do := func(id string) proto.Result {
		res, _, ok := c.do(ctx, proto.Command{ID: id, Kind: "slow", Payload: json.RawMessage(`"` + id + `"`)}, handlers, nil)
		if !ok {
			t.Errorf("%s: no result", id)
		}
		return res
	}
	// Three sends of one id while it runs attach to one run.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { do("a") })
	}
	<-started
	close(release)
	wg.Wait()
	steps := []struct {
		id   string
		runs int32
	}{
		{"a", 1}, // remembered
		{"b", 2},
		{"c", 3},
		{"c", 3},
		{"a", 3}, // still remembered: forgetting is TestKeptResults'
	}
	for _, s := range steps {
		if got := do(s.id); string(got.Result) != `"`+s.id+`"` {
			t.Fatalf("%s: result %s", s.id, got.Result)
		}
		if n := runs.Load(); n != s.runs {
			t.Fatalf("after %s: %d runs, want %d", s.id, n, s.runs)
		}
	}
}

func TestCommandsForgetCancelledRuns(t *testing.T) {
	var runs atomic.Int32
	handlers := map[string]Handler{
		"wait": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			if runs.Add(1) == 1 {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return json.RawMessage(`"ok"`), nil
		},
	}
	var c commands
	c.init(8)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, ok := c.do(ctx, proto.Command{ID: "x", Kind: "wait"}, handlers, nil); ok {
		t.Fatal("a run cut short by the agent's stop gave a result")
	}
	res, _, ok := c.do(context.Background(), proto.Command{ID: "x", Kind: "wait"}, handlers, nil)
	if !ok || string(res.Result) != `"ok"` || runs.Load() != 2 {
		t.Fatalf("resend after the stop: %s, %v, %d runs", res.Result, ok, runs.Load())
	}
}

// TestAfterReplyGivenBack: an answer that could not be delivered hands its after-reply
// action back, and the answer to the registry's resend takes it.
func TestAfterReplyGivenBack(t *testing.T) {
	var ran atomic.Int32
	handlers := map[string]Handler{
		"kexec": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			AfterReply(ctx, func() { ran.Add(1) })
			return json.RawMessage(`"ok"`), nil
		},
	}
	var c commands
	c.init(8)
	cmd := proto.Command{ID: "k-1", Kind: "kexec"}
	_, after, ok := c.do(context.Background(), cmd, handlers, nil)
	if !ok || after == nil {
		t.Fatalf("first answer: after %v, ok %v", after != nil, ok)
	}
	c.giveBack(cmd.ID, after) // the first answer's write failed
	_, again, ok := c.do(context.Background(), cmd, handlers, nil)
	if !ok || again == nil {
		t.Fatalf("the resend's answer has no after-reply action")
	}
	again()
	if _, third, _ := c.do(context.Background(), cmd, handlers, nil); third != nil || ran.Load() != 1 {
		t.Fatalf("after ran %d times; a third answer has one: %v", ran.Load(), third != nil)
	}
}
