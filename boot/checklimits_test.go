package boot

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestCheckLimitsWarned: the warning at start names the settings that hold the checks
// below the DHCP server's pace, and only those; none when the host holds them all.
func TestCheckLimitsWarned(t *testing.T) {
	for name, c := range map[string]struct {
		room, neighbours int
		known            bool
		want, not        []string
	}{
		"neighbour table":          {room: 3072, neighbours: 1024, known: true, want: []string{"level=WARN", "gc_thresh3 to 4096", "checksPerSecond=341", "offersPerSecond=1024"}, not: []string{"wmem_max"}},
		"send buffer":              {room: 1024, neighbours: 8192, known: true, want: []string{"net.core.wmem_max to 1572864", "checksPerSecond=341"}, not: []string{"gc_thresh3"}},
		"both":                     {room: 512, neighbours: 1024, known: true, want: []string{"wmem_max", "gc_thresh3", "checksPerSecond=170"}},
		"table unknown, buffer ok": {room: 3072, known: false},
		"enough":                   {room: 3072, neighbours: 8192, known: true},
	} {
		t.Run(name, func(t *testing.T) {
			var log bytes.Buffer
			s := &Server{log: slog.New(slog.NewTextHandler(&log, nil))}
			s.warnCheckLimits(500*time.Millisecond, 3072, c.room, c.neighbours, c.known)
			got := log.String()
			if len(c.want) == 0 && got != "" {
				t.Errorf("warned with the host's limits enough:\n%s", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("log lacks %q:\n%s", w, got)
				}
			}
			for _, n := range c.not {
				if strings.Contains(got, n) {
					t.Errorf("log names %q, which does not hold the checks back:\n%s", n, got)
				}
			}
		})
	}
}
