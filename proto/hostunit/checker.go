package hostunit

import (
	"strings"
	"unicode"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/labelexpr"
)

// checker is a report with the checks the units share.
type checker struct {
	*jsondoc.Report
}

// fields walks a unit's settings object: the unit's own fields and when.
func (c checker) fields(v *jsondoc.Value, p jsondoc.Path, fields map[string]jsondoc.Check, required ...string) bool {
	fields["when"] = c.when
	return c.Fields(v, p, fields, required...)
}

// when checks a label expression.
func (c checker) when(v *jsondoc.Value, p jsondoc.Path) {
	s, ok := c.String(v, p)
	if !ok {
		return
	}
	if _, err := labelexpr.Parse(s); err != nil {
		c.Add(v, p, "%v", err)
	}
}

// bool checks a boolean field.
func (c checker) bool(v *jsondoc.Value, p jsondoc.Path) { c.Bool(v, p) }

// line returns the string v when it is a single line of at most max bytes without control
// characters, else records a problem.
func (c checker) line(v *jsondoc.Value, p jsondoc.Path, max int) (string, bool) {
	s, ok := c.String(v, p)
	if !ok {
		return "", false
	}
	if len(s) > max {
		c.Add(v, p, "longer than %d bytes", max)
		return "", false
	}
	if i := strings.IndexFunc(s, isControl); i >= 0 {
		c.Add(v, p, "must be one line without control characters; found %U", []rune(s[i:])[0])
		return "", false
	}
	return s, true
}

// isControl reports characters that may not appear in a single-line value: control
// characters and the Unicode line and paragraph separators.
func isControl(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
}

// object returns the members of the object v, at most max of them, else records a
// problem.
func (c checker) object(v *jsondoc.Value, p jsondoc.Path, max int) ([]jsondoc.Member, bool) {
	if !c.Object(v, p) {
		return nil, false
	}
	if len(v.Members) > max {
		c.Add(v, p, "has %d entries, more than the %d allowed", len(v.Members), max)
		return nil, false
	}
	return v.Members, true
}
