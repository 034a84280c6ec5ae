package kernel

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/proto/hostunit"
)

// Bracketed returns the word a sysfs choice file marks as current: madvise in
// "always [madvise] never". It is false when no single word is bracketed.
func Bracketed(s string) (string, bool) {
	var found string
	for word := range strings.FieldsSeq(s) {
		if inner, ok := strings.CutPrefix(word, "["); ok {
			inner, ok = strings.CutSuffix(inner, "]")
			if !ok || inner == "" || found != "" {
				return "", false
			}
			found = inner
		}
	}
	return found, found != ""
}

// ParseRanges reads a list of numbers as the kernel writes CPU and node lists in sysfs
// ("0-63,128-191"; "" is none). A number beyond hostunit.MaxCPU, or a list of more
// numbers than there can be CPUs, is an error: no host has them, and a hostile file must
// not make bcd loop or fill its memory.
func ParseRanges(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err1 := strconv.Atoi(lo)
		last, err2 := first, error(nil)
		if isRange {
			last, err2 = strconv.Atoi(hi)
		}
		switch {
		case err1 != nil || err2 != nil || first < 0 || last < first:
			return nil, fmt.Errorf("%q is not a number or an ascending range first-last", part)
		case last > hostunit.MaxCPU:
			return nil, fmt.Errorf("%d is beyond the highest CPU number, %d", last, hostunit.MaxCPU)
		case len(out)+last-first >= hostunit.MaxCPU+1:
			return nil, fmt.Errorf("the list names more than %d numbers", hostunit.MaxCPU+1)
		}
		for n := first; n <= last; n++ {
			out = append(out, n)
		}
	}
	return out, nil
}

// FormatRanges writes ascending numbers as a kernel list: 0-3,8.
func FormatRanges(ns []int) string {
	var b strings.Builder
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ns[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(ns[j]))
		}
		i = j + 1
	}
	return b.String()
}
