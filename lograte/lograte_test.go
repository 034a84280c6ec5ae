package lograte

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLimiter: a flood within a minute is one line, the first; the next line, a minute
// on, stands for the flood's others and itself; Quiet says when a line is due again.
func TestLimiter(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var l Limiter
	start := time.Unix(1_000_000, 0)
	if !l.Quiet(start) {
		t.Error("a new limiter is not quiet")
	}
	for i := range 100 {
		l.Warn(log, start.Add(time.Duration(i)*100*time.Millisecond), "refused", "refused")
	}
	if l.Quiet(start.Add(59 * time.Second)) {
		t.Error("quiet within the minute of a line")
	}
	l.Warn(log, start.Add(Period), "refused", "refused")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "refused=1") || !strings.Contains(lines[1], "refused=100") {
		t.Fatalf("got %d lines, want the flood's first (refused=1) and one a minute on (refused=100):\n%s", len(lines), buf.String())
	}
	if !l.Quiet(start.Add(2 * Period)) {
		t.Error("not quiet a minute after its last line")
	}
}
