package workflow

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// commandID is the id of one attempt: run, step and attempt, for example
// wf_0123456789abcdef:main.5:a1 (the first try of the sixth main step) or
// wf_0123456789abcdef:cleanup.0:f2 (the second try of a cleanup step's fallback). It
// uses only the characters agents accept in command ids.
func commandID(run string, phase string, index int, fallback bool, n int) string {
	track := "a"
	if fallback {
		track = "f"
	}
	return fmt.Sprintf("%s:%s.%d:%s%d", run, phase, index, track, n)
}

// subCommandID appends sub to an attempt's id, for an attempt that sends several
// commands.
func subCommandID(attempt, sub string) string {
	if sub == "" {
		return attempt
	}
	return attempt + ":" + sub
}

// stepOf parses a command id back into its run, phase and index.
func stepOf(id string) (run, phase string, index int, err error) {
	parts := strings.Split(id, ":")
	bad := proto.Errorf(proto.NotFound, "command %q is not a workflow step's", id)
	if len(parts) < 3 {
		return "", "", 0, bad
	}
	phase, num, ok := strings.Cut(parts[1], ".")
	index, convErr := strconv.Atoi(num)
	if !ok || convErr != nil || index < 0 || strconv.Itoa(index) != num || parts[0] == "" || phase == "" {
		return "", "", 0, bad
	}
	return parts[0], phase, index, nil
}
