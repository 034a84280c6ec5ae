package session

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
	"github.com/quic-go/quic-go"
)

// TestOnlyAWithdrawalCancelsACommand: a registry that resets a command's stream with
// proto.CloseWithdrawn has the command's handler cancelled; one that resets it with any
// other code (a registry's failed delivery) leaves it running, and a resend of the same
// id joins it and gets the answer the handler finished with.
func TestOnlyAWithdrawalCancelsACommand(t *testing.T) {
	ln, _, cfg := bareRegistry(t, nil, nil)
	cfg.Log = slog.New(slog.DiscardHandler)
	var mu sync.Mutex
	started, ended := map[string]bool{}, map[string]error{}
	release := make(chan struct{})
	cfg.Handlers = map[string]Handler{"hang": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
		var id string
		json.Unmarshal(p, &id)
		mu.Lock()
		started[id] = true
		mu.Unlock()
		select {
		case <-release:
			return json.RawMessage(`"done"`), nil
		case <-ctx.Done():
			mu.Lock()
			ended[id] = ctx.Err()
			mu.Unlock()
			return nil, ctx.Err()
		}
	}}
	runAgent(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(id string) *quic.Stream {
		t.Helper()
		s, err := conn.OpenStreamSync(ctx)
		if err == nil {
			err = proto.WriteMessage(s, &proto.Message{Type: proto.MsgCommand, Command: &proto.Command{ID: id, Kind: "hang", Payload: json.RawMessage(`"` + id + `"`)}})
		}
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, id+" to run", 20*time.Second, 5*time.Millisecond, func() bool { mu.Lock(); defer mu.Unlock(); return started[id] })
		return s
	}
	reset := func(s *quic.Stream, code proto.CloseCode) {
		s.CancelWrite(quic.StreamErrorCode(code))
		s.CancelRead(quic.StreamErrorCode(code))
	}

	reset(send("failed"), proto.CloseProtocol)
	reset(send("withdrawn"), proto.CloseWithdrawn)
	testkit.WaitFor(t, "the withdrawn command's handler to be cancelled", 20*time.Second, 5*time.Millisecond, func() bool { mu.Lock(); defer mu.Unlock(); return ended["withdrawn"] != nil })

	s, err := conn.OpenStreamSync(ctx)
	if err == nil {
		err = proto.WriteMessage(s, &proto.Message{Type: proto.MsgCommand, Command: &proto.Command{ID: "failed", Kind: "hang", Payload: json.RawMessage(`"failed"`)}})
	}
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	m, err := proto.ReadMessage(s)
	if err != nil || m.Type != proto.MsgResult || m.Result.Error != nil || string(m.Result.Result) != `"done"` {
		t.Fatalf("the resend of the command whose stream failed: %+v, %v; want its handler's answer", m.Result, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if ended["failed"] != nil {
		t.Errorf("a stream reset with another code cancelled the command: %v", ended["failed"])
	}
}
