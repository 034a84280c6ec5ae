package session

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/testkit"
	"github.com/quic-go/quic-go"
)

// TestSilentRegistryGivenUp: a registry that is gone altogether (its host dead: not a
// packet back, not even the acknowledgement of a ping) is given up pingTimeout after
// the agent's next ping, on the agent's clock, not after QUIC's idle timeout of four
// periods (100 s, real time here, which the test does not wait for): the agent closes
// the session and connects again, to another endpoint where there is one.
func TestSilentRegistryGivenUp(t *testing.T) {
	ln, udp, cfg := bareRegistry(t, nil, &quic.Config{MaxIdleTimeout: time.Hour})
	clk := clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	logs := &warnings{}
	cfg.Log, cfg.Clock, cfg.KeepAlive, cfg.Backoff = slog.New(logs), clk, DefaultKeepAlive, Backoff{Min: time.Hour, Max: time.Hour}
	runAgent(t, cfg)
	actx, stop := context.WithTimeout(t.Context(), 30*time.Second)
	defer stop()
	conn, err := ln.Accept(actx)
	if err != nil {
		t.Fatal(err)
	}
	// Answered, a ping keeps the session.
	clk.BlockUntil(1)
	clk.Advance(DefaultKeepAlive - pingTimeout)
	clk.BlockUntil(1)
	time.Sleep(200 * time.Millisecond) // the registry's acknowledgement of the ping
	clk.Advance(pingTimeout)
	clk.BlockUntil(1)
	if err := conn.Context().Err(); err != nil || logs.saw("answered nothing") {
		t.Fatalf("a session whose registry answers its pings was given up: %v", err)
	}
	// The registry's host dies: its socket is gone, nothing answers.
	udp.Close()
	clk.Advance(DefaultKeepAlive - pingTimeout)
	clk.BlockUntil(1)
	clk.Advance(pingTimeout)
	testkit.WaitFor(t, "the agent giving the silent registry up", 30*time.Second, 10*time.Millisecond, func() bool {
		return logs.saw("answered nothing to a ping")
	})
}

// warnings is a slog handler that keeps the messages of warnings and errors.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) saw(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}
