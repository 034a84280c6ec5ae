package fetch

import (
	"regexp"
	"strconv"
	"testing"
)

// contentRangeForm is RFC 9110's Content-Range of a 206 (section 14.4), whose TOTAL may be
// "*"; unsatisfiedForm is a 416's.
var (
	contentRangeForm = regexp.MustCompile(`^bytes ([0-9]+)-([0-9]+)/([0-9]+|\*)$`)
	unsatisfiedForm  = regexp.MustCompile(`^bytes \*/([0-9]+)$`)
)

// FuzzContentRange feeds any Content-Range header an image's server may answer a resumed
// pull with to the two readers: each takes exactly RFC 9110's form (digits only, LAST not
// before FIRST, TOTAL past LAST) and nothing else, so a body is never resumed at an offset
// the server did not name.
func FuzzContentRange(f *testing.F) {
	for _, seed := range []string{
		"bytes 0-99/100", "bytes 100-199/*", "bytes */100", "bytes 5-4/10", "bytes 0-9/9",
		"bytes +1-+9/10", "bytes -1-9/10", "bytes 0-9223372036854775807/*", "bytes 0-1/99999999999999999999",
		"bytes */-1", "bytes */+5", "Bytes 0-1/2", "bytes 0-1", "", "bytes 1 -2/3",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, h string) {
		first, total, ok := parseContentRange(h)
		wantFirst, wantTotal, wantOK := int64(0), int64(0), false
		if m := contentRangeForm.FindStringSubmatch(h); m != nil {
			a, err1 := strconv.ParseInt(m[1], 10, 64)
			b, err2 := strconv.ParseInt(m[2], 10, 64)
			c, err3 := int64(-1), error(nil)
			if m[3] != "*" {
				c, err3 = strconv.ParseInt(m[3], 10, 64)
			}
			if err1 == nil && err2 == nil && err3 == nil && a <= b && (c == -1 || c > b) {
				wantFirst, wantTotal, wantOK = a, c, true
			}
		}
		if first != wantFirst || total != wantTotal || ok != wantOK {
			t.Fatalf("parseContentRange(%q) = %d, %d, %v; want %d, %d, %v", h, first, total, ok, wantFirst, wantTotal, wantOK)
		}
		n, ok := parseUnsatisfied(h)
		wantN, wantOK := int64(0), false
		if m := unsatisfiedForm.FindStringSubmatch(h); m != nil {
			if v, err := strconv.ParseInt(m[1], 10, 64); err == nil {
				wantN, wantOK = v, true
			}
		}
		if ok != wantOK || (ok && n != wantN) {
			t.Fatalf("parseUnsatisfied(%q) = %d, %v; want %d, %v", h, n, ok, wantN, wantOK)
		}
	})
}
