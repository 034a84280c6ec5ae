package profile

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Bounds of a step timeout.
const (
	minTimeout = time.Second
	maxTimeout = 24 * time.Hour
)

// durationText is hours, minutes and seconds, each optional but in this order, each a
// whole number without leading zeros: 30s, 15m, 1h, 1h30m, 90m.
var durationText = regexp.MustCompile(`^(?:(0|[1-9][0-9]{0,4})h)?(?:(0|[1-9][0-9]{0,4})m)?(?:(0|[1-9][0-9]{0,4})s)?$`)

// ParseDuration parses a duration as profiles and pool policies write it (a step
// timeout, a remediation backoff), from 1s to 24h.
func ParseDuration(s string) (time.Duration, error) {
	m := durationText.FindStringSubmatch(s)
	if s == "" || m == nil {
		return 0, fmt.Errorf("%s is not a duration: write whole hours, minutes and seconds like 30s, 15m, 1h or 1h30m", proto.Quote(s))
	}
	var d time.Duration
	for i, unit := range []time.Duration{time.Hour, time.Minute, time.Second} {
		if m[i+1] != "" {
			n, _ := strconv.Atoi(m[i+1])
			d += time.Duration(n) * unit
		}
	}
	if d < minTimeout || d > maxTimeout {
		return 0, fmt.Errorf("%s is not from %s to %s", s, formatDuration(minTimeout), formatDuration(maxTimeout))
	}
	return d, nil
}

// formatDuration writes a duration the way ParseDuration reads it, in its shortest
// form: 1h30m, 45s, 2h.
func formatDuration(d time.Duration) string {
	var b strings.Builder
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.d; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.name)
			d -= n * u.d
		}
	}
	if b.Len() == 0 {
		return "0s"
	}
	return b.String()
}
