package jsondoc

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/better-compute/better-compute/proto"
)

// Limits bound what one document may cost to parse.
type Limits struct {
	// MaxBytes is the largest document accepted.
	MaxBytes int
	// MaxDepth is the deepest nesting of arrays and objects accepted; the top-level
	// object or array is depth 1.
	MaxDepth int
}

// SyntaxError is why a document is not acceptable JSON: where, and at which value.
type SyntaxError struct {
	// Offset is the byte offset of the problem; Line and Column (in characters) count
	// from 1.
	Offset, Line, Column int
	// Path names the value being read when the problem was found ("" for the document).
	Path Path
	Msg  string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Parse parses data as one JSON value within the limits.
func Parse(data []byte, lim Limits) (*Value, *SyntaxError) {
	p := &parser{data: data, lim: lim}
	if len(data) > lim.MaxBytes {
		return nil, p.errAt(0, "the document is %d bytes, more than the %d allowed", len(data), lim.MaxBytes)
	}
	if len(data) >= 3 && string(data[:3]) == "\uFEFF" {
		return nil, p.errAt(0, "the document starts with a byte order mark; remove it")
	}
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos < len(data) {
		return nil, p.errAt(p.pos, "unexpected %s after the end of the document", p.describe())
	}
	return v, nil
}

type parser struct {
	data  []byte
	pos   int
	depth int
	lim   Limits
	// path is the path of the value being parsed, for errors.
	path []Path
}

func (p *parser) currentPath() Path {
	if len(p.path) == 0 {
		return ""
	}
	return p.path[len(p.path)-1]
}

func (p *parser) errAt(off int, format string, args ...any) *SyntaxError {
	line, col := Position(p.data, off)
	return &SyntaxError{Offset: off, Line: line, Column: col, Path: p.currentPath(), Msg: proto.Sprintf(format, args...)}
}

// describe names the byte at the current position for a message.
func (p *parser) describe() string {
	if p.pos >= len(p.data) {
		return "end of document"
	}
	r, _ := utf8.DecodeRune(p.data[p.pos:])
	return strconv.QuoteRune(r)
}

func (p *parser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value() (*Value, *SyntaxError) {
	p.space()
	if p.pos >= len(p.data) {
		return nil, p.errAt(p.pos, "unexpected end of document, expected a value")
	}
	start := p.pos
	var v *Value
	var err *SyntaxError
	switch c := p.data[p.pos]; {
	case c == '{':
		v, err = p.object()
	case c == '[':
		v, err = p.array()
	case c == '"':
		var s string
		s, err = p.str()
		v = &Value{Kind: String, Text: s}
	case c == '-' || (c >= '0' && c <= '9'):
		v, err = p.number()
	case c >= 'a' && c <= 'z':
		v, err = p.literal()
	case c == '/':
		return nil, p.errAt(p.pos, "comments are not JSON")
	case c == '\'':
		return nil, p.errAt(p.pos, "strings are written in double quotes")
	case c == 'N' || c == 'I':
		return nil, p.errAt(p.pos, "NaN and Infinity are not JSON numbers")
	default:
		return nil, p.errAt(p.pos, "unexpected %s, expected a value", p.describe())
	}
	if err != nil {
		return nil, err
	}
	v.Offset, v.End, v.Raw = start, p.pos, p.data[start:p.pos]
	return v, nil
}

func (p *parser) enter() *SyntaxError {
	p.depth++
	if p.depth > p.lim.MaxDepth {
		return p.errAt(p.pos, "nested more than %d levels deep", p.lim.MaxDepth)
	}
	return nil
}

// open enters the object or array whose opening bracket is at p.pos, and reports whether
// close follows at once: an empty one, left again.
func (p *parser) open(close byte) (empty bool, err *SyntaxError) {
	if err := p.enter(); err != nil {
		return false, err
	}
	p.pos++
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == close {
		p.pos++
		p.depth--
		return true, nil
	}
	return false, nil
}

// next reads what follows a member or an item: a comma before the next, or close, which
// leaves the object or array (done).
func (p *parser) next(close byte) (done bool, err *SyntaxError) {
	p.space()
	if p.pos >= len(p.data) {
		return false, p.errAt(p.pos, "unexpected end of document, expected , or %c", close)
	}
	switch p.data[p.pos] {
	case ',':
		p.pos++
		return false, nil
	case close:
		p.pos++
		p.depth--
		return true, nil
	}
	return false, p.errAt(p.pos, "unexpected %s, expected , or %c", p.describe(), close)
}

func (p *parser) object() (*Value, *SyntaxError) {
	v := &Value{Kind: Object}
	if empty, err := p.open('}'); empty || err != nil {
		return v, err
	}
	var seen map[string]bool
	base := p.currentPath()
	for {
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			if p.pos < len(p.data) && p.data[p.pos] == '}' {
				return nil, p.errAt(p.pos, "trailing comma before }")
			}
			if p.pos < len(p.data) && p.data[p.pos] == '/' {
				return nil, p.errAt(p.pos, "comments are not JSON")
			}
			return nil, p.errAt(p.pos, "unexpected %s, expected a field name in double quotes", p.describe())
		}
		keyOff := p.pos
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		p.path = append(p.path, base.Field(key))
		if seen == nil {
			seen = make(map[string]bool)
		}
		if seen[key] {
			return nil, p.errAt(keyOff, "duplicate field %q", key)
		}
		seen[key] = true
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.errAt(p.pos, "unexpected %s, expected : after the field name", p.describe())
		}
		p.pos++
		mv, err := p.value()
		if err != nil {
			return nil, err
		}
		p.path = p.path[:len(p.path)-1]
		v.Members = append(v.Members, Member{Key: key, KeyOffset: keyOff, Value: mv})
		if done, err := p.next('}'); done || err != nil {
			return v, err
		}
	}
}

func (p *parser) array() (*Value, *SyntaxError) {
	v := &Value{Kind: Array}
	if empty, err := p.open(']'); empty || err != nil {
		return v, err
	}
	base := p.currentPath()
	for {
		p.space()
		if p.pos < len(p.data) && p.data[p.pos] == ']' {
			return nil, p.errAt(p.pos, "trailing comma before ]")
		}
		p.path = append(p.path, base.Index(len(v.Items)))
		item, err := p.value()
		if err != nil {
			return nil, err
		}
		p.path = p.path[:len(p.path)-1]
		v.Items = append(v.Items, item)
		if done, err := p.next(']'); done || err != nil {
			return v, err
		}
	}
}

func (p *parser) literal() (*Value, *SyntaxError) {
	start := p.pos
	end := start
	for end < len(p.data) && isWordByte(p.data[end]) {
		end++
	}
	switch string(p.data[start:end]) {
	case "true":
		p.pos = end
		return &Value{Kind: Bool, Bool: true}, nil
	case "false":
		p.pos = end
		return &Value{Kind: Bool}, nil
	case "null":
		p.pos = end
		return &Value{Kind: Null}, nil
	}
	if end-start > 32 {
		end = start + 32
	}
	return nil, p.errAt(start, "unexpected %q, expected a value", string(p.data[start:end]))
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func (p *parser) number() (*Value, *SyntaxError) {
	start := p.pos
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.data[p.pos] == '-' {
		p.pos++
	}
	if p.pos < len(p.data) && p.data[p.pos] == '0' {
		p.pos++
		if p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			return nil, p.errAt(start, "numbers do not start with 0")
		}
	} else if digits() == 0 {
		if p.pos < len(p.data) && p.data[p.pos] == 'I' {
			return nil, p.errAt(start, "NaN and Infinity are not JSON numbers")
		}
		return nil, p.errAt(p.pos, "unexpected %s, expected a digit", p.describe())
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return nil, p.errAt(p.pos, "unexpected %s, expected a digit after the decimal point", p.describe())
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, p.errAt(p.pos, "unexpected %s, expected a digit in the exponent", p.describe())
		}
	}
	return &Value{Kind: Number, Text: string(p.data[start:p.pos])}, nil
}

// str reads a string at the opening quote and returns it decoded.
func (p *parser) str() (string, *SyntaxError) {
	p.pos++ // "
	var b strings.Builder
	for {
		if p.pos >= len(p.data) {
			return "", p.errAt(p.pos, "unexpected end of document inside a string")
		}
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return b.String(), nil
		case c == '\\':
			if err := p.escape(&b); err != nil {
				return "", err
			}
		case c < 0x20:
			return "", p.errAt(p.pos, "control character %U inside a string; escape it", rune(c))
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			p.pos++
		default:
			r, n := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && n == 1 {
				return "", p.errAt(p.pos, "invalid UTF-8")
			}
			b.WriteRune(r)
			p.pos += n
		}
	}
}

func (p *parser) escape(b *strings.Builder) *SyntaxError {
	start := p.pos
	p.pos++ // backslash
	if p.pos >= len(p.data) {
		return p.errAt(p.pos, "unexpected end of document inside a string")
	}
	c := p.data[p.pos]
	p.pos++
	switch c {
	case '"', '\\', '/':
		b.WriteByte(c)
	case 'b':
		b.WriteByte('\b')
	case 'f':
		b.WriteByte('\f')
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'u':
		r, ok := p.hex4()
		if !ok {
			return p.errAt(start, "\\u must be followed by four hex digits")
		}
		if utf16.IsSurrogate(r) {
			if r >= 0xDC00 || p.pos+1 >= len(p.data) || p.data[p.pos] != '\\' || p.data[p.pos+1] != 'u' {
				return p.errAt(start, "lone UTF-16 surrogate \\u%04X", r)
			}
			p.pos += 2
			r2, ok := p.hex4()
			if !ok || r2 < 0xDC00 || r2 > 0xDFFF {
				return p.errAt(start, "lone UTF-16 surrogate \\u%04X", r)
			}
			r = utf16.DecodeRune(r, r2)
		}
		b.WriteRune(r)
	default:
		return p.errAt(start, "unknown escape \\%c", c)
	}
	return nil
}

func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.data[p.pos:p.pos+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.pos += 4
	return rune(n), true
}
