package labelexpr

import "strings"

// Expr is a parsed label expression. The zero Expr is no condition: it holds for any
// labels, and is what a `when` that was left out decodes to.
type Expr struct {
	root node
}

// node is one operator of the expression tree.
type node interface {
	eval(labels map[string]string) bool
	// write appends the node, in parentheses when it binds looser than its context.
	write(b *strings.Builder, context precedence)
}

// precedence orders the operators from the loosest.
type precedence int

const (
	precOr precedence = iota
	precAnd
	precNot
)

// Eval reports whether the expression holds for the labels. The zero Expr always does.
func (e Expr) Eval(labels map[string]string) bool {
	if e.root == nil {
		return true
	}
	return e.root.eval(labels)
}

// String returns the canonical text of the expression, "" for the zero Expr.
func (e Expr) String() string {
	if e.root == nil {
		return ""
	}
	var b strings.Builder
	e.root.write(&b, precOr)
	return b.String()
}

// IsZero reports whether e is the zero Expr (no condition).
func (e Expr) IsZero() bool { return e.root == nil }

// Equal reports whether two expressions have the same canonical text.
func (e Expr) Equal(o Expr) bool { return e.String() == o.String() }

// MarshalText writes the canonical text.
func (e Expr) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// UnmarshalText parses text into e.
func (e *Expr) UnmarshalText(text []byte) error {
	x, err := Parse(string(text))
	if err != nil {
		return err
	}
	*e = x
	return nil
}

// isSet is the truth of a bare label name.
func isSet(labels map[string]string, key string) bool {
	v, ok := labels[key]
	return ok && v != "false" && v != "0"
}

type labelNode struct{ key string }

func (n labelNode) eval(l map[string]string) bool { return isSet(l, n.key) }

func (n labelNode) write(b *strings.Builder, _ precedence) { b.WriteString(n.key) }

type compareNode struct {
	key, value string
	notEqual   bool
}

func (n compareNode) eval(l map[string]string) bool {
	v, ok := l[n.key]
	return (ok && v == n.value) != n.notEqual
}

func (n compareNode) write(b *strings.Builder, _ precedence) {
	b.WriteString(n.key)
	if n.notEqual {
		b.WriteString("!=")
	} else {
		b.WriteByte('=')
	}
	if isBareValue(n.value) {
		b.WriteString(n.value)
	} else {
		b.WriteString("'" + n.value + "'")
	}
}

type notNode struct{ x node }

func (n notNode) eval(l map[string]string) bool { return !n.x.eval(l) }

func (n notNode) write(b *strings.Builder, _ precedence) {
	b.WriteByte('!')
	// A comparison under ! is parenthesised so that it does not read as a negated name.
	if _, ok := n.x.(compareNode); ok {
		b.WriteByte('(')
		defer b.WriteByte(')')
	}
	n.x.write(b, precNot)
}

// listNode is a conjunction (and) or a disjunction (or) of two or more operands.
type listNode struct {
	and bool
	xs  []node
}

func (n listNode) eval(l map[string]string) bool {
	for _, x := range n.xs {
		if x.eval(l) != n.and {
			return !n.and
		}
	}
	return n.and
}

func (n listNode) write(b *strings.Builder, context precedence) {
	own, sep := precOr, " || "
	if n.and {
		own, sep = precAnd, " && "
	}
	if context > own {
		b.WriteByte('(')
		defer b.WriteByte(')')
	}
	for i, x := range n.xs {
		if i > 0 {
			b.WriteString(sep)
		}
		x.write(b, own+1)
	}
}
