package proto

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCut: what Cut keeps of an error's message is within its limit, valid UTF-8 when
// the message was, and the message itself when it was within the limit.
func FuzzCut(f *testing.F) {
	f.Add(strings.Repeat("é", 700), 1024)
	f.Add("short", 64)
	f.Add(strings.Repeat("x", 5000), 96)
	f.Add("\xe9\x80", 1)
	f.Fuzz(func(t *testing.T, msg string, limit int) {
		limit = 1 + int(uint(limit)%4096)
		e := (&Error{Code: DriverError, Message: msg, Details: Details{Path: msg, Reason: msg}}).Cut(limit)
		if len(e.Message) > max(limit, cutNote) {
			t.Errorf("a message of %d bytes cut to %d keeps %d", len(msg), limit, len(e.Message))
		}
		if len(msg) <= limit && e.Message != msg {
			t.Errorf("a message within the limit changed: %q", e.Message)
		}
		if utf8.ValidString(msg) && !utf8.ValidString(e.Message) {
			t.Errorf("a valid message cut to invalid UTF-8: %q", e.Message)
		}
	})
}
