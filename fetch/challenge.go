package fetch

import "strings"

// Challenge is one challenge of a WWW-Authenticate header: its scheme, lower-cased, and
// its auth-params with lower-cased names.
type Challenge struct {
	Scheme string
	Params map[string]string
}

// ParseChallenges reads a WWW-Authenticate header (RFC 9110 section 11.6.1): a list of
// challenges, each a scheme followed by either a token68 (skipped) or comma-separated
// auth-params (name=token or name="quoted string"). It returns the challenges it read
// before anything malformed.
func ParseChallenges(h string) []Challenge {
	var out []Challenge
	p := parser{s: h}
	for {
		p.skipSpaceAndCommas()
		scheme := p.token()
		if scheme == "" {
			return out
		}
		c := Challenge{Scheme: strings.ToLower(scheme), Params: map[string]string{}}
		if !p.token68() {
			for {
				save := p.i
				p.skipSpaceAndCommas()
				name := p.token()
				p.skipSpace()
				if name == "" || !p.eat('=') {
					p.i = save // the next challenge's scheme, or the end
					break
				}
				p.skipSpace()
				val, ok := p.value()
				if !ok {
					return append(out, c)
				}
				c.Params[strings.ToLower(name)] = val
			}
		}
		out = append(out, c)
	}
}

type parser struct {
	s string
	i int
}

func (p *parser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *parser) eat(b byte) bool {
	if p.i < len(p.s) && p.s[p.i] == b {
		p.i++
		return true
	}
	return false
}

func (p *parser) skipSpace() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *parser) skipSpaceAndCommas() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == ',') {
		p.i++
	}
}

// isTchar is RFC 9110's tchar.
func isTchar(b byte) bool {
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}

func (p *parser) token() string {
	start := p.i
	for p.i < len(p.s) && isTchar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

// token68 consumes a token68 credential (characters, then only '=' padding) when one
// stands here followed by a comma or the end; else it consumes nothing.
func (p *parser) token68() bool {
	q := *p
	q.skipSpace()
	start := q.i
	for q.i < len(q.s) {
		b := q.s[q.i]
		if b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("-._~+/", b) >= 0 {
			q.i++
			continue
		}
		break
	}
	if q.i == start {
		return false
	}
	for q.eat('=') {
	}
	q.skipSpace()
	if q.i < len(q.s) && q.s[q.i] != ',' {
		return false
	}
	p.i = q.i
	return true
}

// value reads a token or a quoted-string with backslash escapes.
func (p *parser) value() (string, bool) {
	if p.peek() != '"' {
		v := p.token()
		return v, v != ""
	}
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch c {
		case '"':
			return b.String(), true
		case '\\':
			if p.i >= len(p.s) {
				return "", false
			}
			c = p.s[p.i]
			p.i++
		}
		b.WriteByte(c)
	}
	return "", false
}
