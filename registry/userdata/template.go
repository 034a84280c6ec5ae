package userdata

import (
	"slices"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// Template renders one user-data document from the variables. The values it gets are
// checked already: each is a single line without "{{".
type Template interface {
	Render(v Vars) ([]byte, error)
}

// TemplateFunc is a template written as a Go function of the variables.
type TemplateFunc func(v Vars) ([]byte, error)

// Render calls f.
func (f TemplateFunc) Render(v Vars) ([]byte, error) { return f(v) }

// textTemplate is a text with {{name}} placeholders: literal text and placeholders,
// alternating, starting and ending with text.
type textTemplate struct {
	text  []string
	names []string
}

// maxTemplateLen bounds a template text.
const maxTemplateLen = 1 << 20

// ParseTemplate parses a text with {{name}} placeholders (spaces inside the braces are
// allowed: {{ nodeId }}); the names are VarNames. Every "{{" must open a placeholder of
// a known name: anything else is INVALID_CONFIG naming the line. There is no way to
// write a literal "{{".
func ParseTemplate(text string) (Template, error) {
	if len(text) > maxTemplateLen {
		return nil, proto.Errorf(proto.InvalidConfig, "the template is longer than %d bytes", maxTemplateLen)
	}
	t := &textTemplate{}
	rest := text
	for {
		before, after, found := strings.Cut(rest, "{{")
		t.text = append(t.text, before)
		if !found {
			return t, nil
		}
		line := strings.Count(text[:len(text)-len(after)], "\n") + 1
		inner, tail, closed := strings.Cut(after, "}}")
		name := strings.TrimSpace(inner)
		switch {
		case !closed || strings.Contains(inner, "\n"):
			return nil, proto.Errorf(proto.InvalidConfig, "line %d: a {{ is not closed by }} on the same line", line)
		case !slices.Contains(VarNames, name):
			return nil, proto.Errorf(proto.InvalidConfig, "line %d: {{%s}} names no variable; the variables are %s", line, inner, strings.Join(VarNames, ", "))
		}
		t.names = append(t.names, name)
		rest = tail
	}
}

// Render replaces each placeholder with its value. A placeholder whose variable has no
// value (the pins when none are configured) is INVALID_CONFIG.
func (t *textTemplate) Render(v Vars) ([]byte, error) {
	var b strings.Builder
	for i, text := range t.text {
		b.WriteString(text)
		if i == len(t.names) {
			break
		}
		value, _ := v.Lookup(t.names[i])
		if value == "" {
			hint := ""
			if strings.HasSuffix(t.names[i], "Pin") {
				hint = ": configure userData.pins"
			}
			return nil, proto.Errorf(proto.InvalidConfig, "the template uses {{%s}}, which has no value%s", t.names[i], hint)
		}
		b.WriteString(value)
	}
	return []byte(b.String()), nil
}
