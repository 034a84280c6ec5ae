package kernel

import (
	"strconv"
	"strings"
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
