package jsondoc

import (
	"errors"
	"slices"
	"strconv"
	"strings"
)

// Check checks the value v found at path p, recording problems in a Report.
type Check func(v *Value, p Path)

// Fields walks the members of the object v in document order and runs the check of each
// known name; a member with no check is an unknown field. Then each required name that is
// absent is a problem at its own path. It reports false, with a problem, when v is not an
// object.
func (r *Report) Fields(v *Value, p Path, fields map[string]Check, required ...string) bool {
	if !r.Object(v, p) {
		return false
	}
	for _, m := range v.Members {
		check, ok := fields[m.Key]
		if !ok {
			r.AddAt(m.KeyOffset, p.Field(m.Key), "unknown field %q; the fields are %s", m.Key, quoteList(sortedKeys(fields)))
			continue
		}
		check(m.Value, p.Field(m.Key))
	}
	for _, name := range required {
		if v.Get(name) == nil {
			r.AddMissing(v, p.Field(name), "%s is required", name)
		}
	}
	return true
}

func sortedKeys(m map[string]Check) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// quoteList writes names as "a", "b" or "c".
func quoteList(names []string) string {
	var b strings.Builder
	for i, n := range names {
		switch {
		case i == 0:
		case i == len(names)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(n))
	}
	return b.String()
}

// Object reports whether v is an object, recording a problem when it is not.
func (r *Report) Object(v *Value, p Path) bool {
	return r.kind(v, p, Object)
}

func (r *Report) kind(v *Value, p Path, want Kind) bool {
	if v.Kind != want {
		r.Add(v, p, "must be %s, not %s", want, v.Kind)
		return false
	}
	return true
}

// Array returns the items of the array v, recording a problem when v is not an array or
// has more than max items.
func (r *Report) Array(v *Value, p Path, max int) ([]*Value, bool) {
	if !r.kind(v, p, Array) {
		return nil, false
	}
	if len(v.Items) > max {
		r.Add(v, p, "has %d items, more than the %d allowed", len(v.Items), max)
		return nil, false
	}
	return v.Items, true
}

// String returns the string v, recording a problem when v is not a string.
func (r *Report) String(v *Value, p Path) (string, bool) {
	if !r.kind(v, p, String) {
		return "", false
	}
	return v.Text, true
}

// Bool returns the boolean v, recording a problem when v is not a boolean.
func (r *Report) Bool(v *Value, p Path) (bool, bool) {
	if !r.kind(v, p, Bool) {
		return false, false
	}
	return v.Bool, true
}

// Enum returns the string v, recording a problem unless it is one of allowed.
func (r *Report) Enum(v *Value, p Path, allowed ...string) (string, bool) {
	s, ok := r.String(v, p)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, s) {
		r.Add(v, p, "%q is not one of %s", s, quoteList(allowed))
		return "", false
	}
	return s, true
}

// Whole returns the number v as an integer, recording a problem unless it is a whole
// number from min to max written as one (42, not 42.0 or 4.2e1).
func (r *Report) Whole(v *Value, p Path, min, max int64) (int64, bool) {
	if v.Kind != Number {
		r.Add(v, p, "must be a whole number from %d to %d, not %s", min, max, v.Kind)
		return 0, false
	}
	n, err := WholeNumber(v.Text)
	if err != nil {
		r.Add(v, p, "%s must be a whole number from %d to %d: %v", v.Text, min, max, err)
		return 0, false
	}
	if n < min || n > max {
		r.Add(v, p, "%d is not a whole number from %d to %d", n, min, max)
		return 0, false
	}
	return n, true
}

// WholeNumber returns the integer a JSON number literal writes, or why it is not one.
// Whole numbers are written without a fraction or an exponent, so that every reader
// (encoding/json into an int among them) takes them exactly as written.
func WholeNumber(text string) (int64, error) {
	if strings.ContainsAny(text, ".eE") {
		return 0, errors.New("write it without a fraction or an exponent")
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, errors.New("out of range")
	}
	return n, nil
}
