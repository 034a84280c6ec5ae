package cmdline

import (
	"fmt"
	"slices"
	"strings"
)

// Choice is a flag that takes one of a fixed list of words (a flag.Value and a
// pflag.Value): a node state, a token kind, a wipe mode. Any other value is refused at the
// flag, naming the words allowed, before the command runs. Declare it with OneOf from the
// list the contract defines, never a copy of it.
type Choice[T ~string] struct {
	p      *T
	values []T
}

// OneOf is a Choice of values, holding *p (the flag's default) until given.
func OneOf[T ~string](p *T, values []T) *Choice[T] {
	return &Choice[T]{p: p, values: values}
}

func (c *Choice[T]) Set(s string) error {
	if !slices.Contains(c.values, T(s)) {
		words := make([]string, len(c.values))
		for i, v := range c.values {
			words[i] = string(v)
		}
		return fmt.Errorf("give one of %s", strings.Join(words, ", "))
	}
	*c.p = T(s)
	return nil
}

// String is the value held; "" for the zero Choice, which flag may print.
func (c *Choice[T]) String() string {
	if c == nil || c.p == nil {
		return ""
	}
	return string(*c.p)
}

// Type is "string": the value is a word, and a required Choice given empty is refused as
// a required string flag is.
func (c *Choice[T]) Type() string { return "string" }
