// Package lograte bounds the log lines that anyone on a network may cause as fast as it
// can send (a refused request, a stranger's packet, a request dropped at a bound): such a
// line goes out at most once a minute and says how many times it stands for, so that a
// flood costs the log a line a minute and the operator still reads how large it was.
package lograte

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Period is how often a Limiter lets its line through at most.
const Period = time.Minute

// Limiter lets one kind of line through at most once a Period, and counts the times
// it stood for: those held back since the last one, and itself. The zero value is ready.
type Limiter struct {
	mu   sync.Mutex
	last time.Time // zero for never
	held int
}

// Log logs msg with args at level when it is due at now, with the times it stands for
// as the attribute count.
func (l *Limiter) Log(log *slog.Logger, level slog.Level, now time.Time, count, msg string, args ...any) {
	l.mu.Lock()
	l.held++
	if !l.last.IsZero() && now.Sub(l.last) < Period {
		l.mu.Unlock()
		return
	}
	times := l.held
	l.held, l.last = 0, now
	l.mu.Unlock()
	log.Log(context.Background(), level, msg, append(args, count, times)...)
}

// Warn is Log at warn.
func (l *Limiter) Warn(log *slog.Logger, now time.Time, count, msg string, args ...any) {
	l.Log(log, slog.LevelWarn, now, count, msg, args...)
}

// Quiet reports whether no line went out within a Period before now: the limiter then
// stands for a new one, and whoever holds limiters by key may forget it.
func (l *Limiter) Quiet(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last.IsZero() || now.Sub(l.last) >= Period
}
