package jsondoc

import (
	"slices"

	"github.com/better-compute/better-compute/proto"
)

// Problem is one thing wrong with a document: where (Path and the byte Offset that orders
// problems as the document reads) and what, said so that the reader knows what to do.
type Problem struct {
	Path    Path
	Message string
	Offset  int
}

// Report collects the problems a walk finds. The zero value is ready to use.
type Report struct {
	problems []Problem
}

// Add records a problem with the value v at path p.
func (r *Report) Add(v *Value, p Path, format string, args ...any) {
	r.AddAt(v.Offset, p, format, args...)
}

// AddMissing records that a member the object obj needs is absent; p is the path the
// member would have. It sorts at the object's closing brace, after the object's members.
func (r *Report) AddMissing(obj *Value, p Path, format string, args ...any) {
	r.AddAt(obj.End-1, p, format, args...)
}

// AddAt records a problem at a byte offset of the document. A string argument formatted
// with %q is quoted by proto.Quote: at most a short prefix of it.
func (r *Report) AddAt(offset int, p Path, format string, args ...any) {
	r.problems = append(r.problems, Problem{Path: p, Message: proto.Sprintf(format, args...), Offset: offset})
}

// Len is the number of problems recorded.
func (r *Report) Len() int { return len(r.problems) }

// Problems returns the problems in document order; problems at the same offset keep the
// order they were recorded in.
func (r *Report) Problems() []Problem {
	ps := slices.Clone(r.problems)
	slices.SortStableFunc(ps, func(a, b Problem) int { return a.Offset - b.Offset })
	return ps
}
