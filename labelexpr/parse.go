package labelexpr

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits of one expression.
const (
	// MaxLen is the longest expression, in bytes.
	MaxLen = 1024
	// MaxNameLen is the longest label name or value, in bytes.
	MaxNameLen = 253
	// MaxDepth is the deepest nesting of parentheses and negations.
	MaxDepth = 32
)

// SyntaxError says why an expression does not parse and where.
type SyntaxError struct {
	// Column is the character (not byte) position of the problem, from 1.
	Column int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("label expression, column %d: %s", e.Column, e.Msg)
}

// Parse parses a label expression. The error is a *SyntaxError. An expression is refused
// when its canonical text (String) would break a limit, though it is written within them
// (commas widened to " && ", "!a=b" parenthesised): whatever Parse accepts, it accepts
// again as String writes it.
func Parse(s string) (Expr, error) {
	e, err := parse(s)
	if err != nil {
		return Expr{}, err
	}
	if text := e.String(); text != s {
		if _, err := parse(text); err != nil {
			return Expr{}, &SyntaxError{Column: 1, Msg: "in canonical form (&& for a comma, a space either side of && and ||, !(a=b) for !a=b) it is " + err.(*SyntaxError).Msg}
		}
	}
	return e, nil
}

// parse parses s within the limits, as it is written.
func parse(s string) (Expr, error) {
	p := &parser{s: s}
	if len(s) > MaxLen {
		return Expr{}, p.errAt(0, "longer than %d bytes", MaxLen)
	}
	if !utf8.ValidString(s) {
		return Expr{}, p.errAt(0, "not valid UTF-8")
	}
	p.blank()
	if p.pos == len(s) {
		return Expr{}, p.errAt(p.pos, "empty expression; write a label name, name=value or name!=value")
	}
	n, err := p.or()
	if err != nil {
		return Expr{}, err
	}
	p.blank()
	if p.pos < len(s) {
		if s[p.pos] == ')' {
			return Expr{}, p.errAt(p.pos, "unmatched )")
		}
		return Expr{}, p.errAt(p.pos, "unexpected %s; join terms with &&, || or a comma", p.describe())
	}
	return Expr{root: n}, nil
}

type parser struct {
	s     string
	pos   int
	depth int
}

func (p *parser) errAt(off int, format string, args ...any) *SyntaxError {
	return &SyntaxError{Column: utf8.RuneCountInString(p.s[:off]) + 1, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) describe() string {
	if p.pos >= len(p.s) {
		return "end of expression"
	}
	r, _ := utf8.DecodeRuneInString(p.s[p.pos:])
	return fmt.Sprintf("%q", r)
}

func (p *parser) blank() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t') {
		p.pos++
	}
}

func (p *parser) at(tok string) bool {
	return strings.HasPrefix(p.s[p.pos:], tok)
}

// or parses operands joined by ||.
func (p *parser) or() (node, error) {
	return p.list(false, p.and)
}

// and parses operands joined by && or a comma.
func (p *parser) and() (node, error) {
	return p.list(true, p.unary)
}

// list parses one or more operands joined by the operator of a conjunction (and) or a
// disjunction, flattening operands that are lists of the same kind.
func (p *parser) list(and bool, operand func() (node, error)) (node, error) {
	var xs []node
	for {
		x, err := operand()
		if err != nil {
			return nil, err
		}
		if l, ok := x.(listNode); ok && l.and == and {
			xs = append(xs, l.xs...)
		} else {
			xs = append(xs, x)
		}
		p.blank()
		switch {
		case and && p.at("&&"):
			p.pos += 2
		case and && p.at(","):
			p.pos++
		case !and && p.at("||"):
			p.pos += 2
		case p.at("&") && !p.at("&&"):
			return nil, p.errAt(p.pos, "write && for and")
		case p.at("|") && !p.at("||"):
			return nil, p.errAt(p.pos, "write || for or")
		default:
			if len(xs) == 1 {
				return xs[0], nil
			}
			return listNode{and: and, xs: xs}, nil
		}
	}
}

func (p *parser) nest() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.errAt(p.pos, "nested more than %d deep", MaxDepth)
	}
	return nil
}

// unary parses a negation, a parenthesised group or a term.
func (p *parser) unary() (node, error) {
	p.blank()
	switch {
	case p.at("!") && !p.at("!="):
		if err := p.nest(); err != nil {
			return nil, err
		}
		p.pos++
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		p.depth--
		if n, ok := x.(notNode); ok {
			return n.x, nil
		}
		return notNode{x: x}, nil
	case p.at("("):
		if err := p.nest(); err != nil {
			return nil, err
		}
		open := p.pos
		p.pos++
		x, err := p.or()
		if err != nil {
			return nil, err
		}
		p.blank()
		if !p.at(")") {
			return nil, p.errAt(p.pos, "unexpected %s; expected ) to close the ( at column %d", p.describe(), p.errAt(open, "").Column)
		}
		p.pos++
		p.depth--
		return x, nil
	}
	return p.term()
}

// term parses name, name=value or name!=value.
func (p *parser) term() (node, error) {
	start := p.pos
	key := p.run(isNameByte)
	if key == "" || !isAlnum(key[0]) {
		p.pos = start
		return nil, p.errAt(start, "unexpected %s; expected a label name", p.describe())
	}
	if len(key) > MaxNameLen {
		return nil, p.errAt(start, "label name longer than %d bytes", MaxNameLen)
	}
	p.blank()
	var notEqual bool
	switch {
	case p.at("!="):
		p.pos += 2
		notEqual = true
	case p.at("=="):
		return nil, p.errAt(p.pos, "write = to compare, not ==")
	case p.at("="):
		p.pos++
	default:
		return labelNode{key: key}, nil
	}
	p.blank()
	value, err := p.value()
	if err != nil {
		return nil, err
	}
	return compareNode{key: key, value: value, notEqual: notEqual}, nil
}

func (p *parser) value() (string, error) {
	start := p.pos
	var v string
	if p.at("'") {
		p.pos++
		end := strings.IndexByte(p.s[p.pos:], '\'')
		if end < 0 {
			return "", p.errAt(start, "unterminated quoted value")
		}
		v = p.s[p.pos : p.pos+end]
		for i, r := range v {
			if r < 0x20 || r == 0x7f {
				return "", p.errAt(p.pos+i, "control character %U in a quoted value", r)
			}
		}
		p.pos += end + 1
	} else {
		v = p.run(isValueByte)
		if v == "" {
			return "", p.errAt(start, "unexpected %s; expected a value (quote it with ' if it has other characters)", p.describe())
		}
	}
	if len(v) > MaxNameLen {
		return "", p.errAt(start, "value longer than %d bytes", MaxNameLen)
	}
	return v, nil
}

// run consumes the longest run of bytes matching ok.
func (p *parser) run(ok func(byte) bool) string {
	start := p.pos
	for p.pos < len(p.s) && ok(p.s[p.pos]) {
		p.pos++
	}
	return p.s[start:p.pos]
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isNameByte(c byte) bool {
	return isAlnum(c) || c == '.' || c == '_' || c == '-' || c == '/'
}

func isValueByte(c byte) bool {
	return isNameByte(c) || c == ':' || c == '+' || c == '@'
}

// isBareValue reports whether a value can be written without quotes.
func isBareValue(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if !isValueByte(v[i]) {
			return false
		}
	}
	return true
}
