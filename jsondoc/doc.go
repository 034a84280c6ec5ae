// Package jsondoc parses JSON documents strictly into a tree that keeps document order and
// byte offsets, and walks such trees collecting every problem with a path to it.
//
// It is the ground under the validators of operator documents (profiles, host-config
// units): a validator walks the tree once, records each problem with the path of the
// offending field (steps[2].timeout) and its offset, and callers take either the first
// problem in document order or all of them.
//
// Parse accepts exactly RFC 8259 JSON in UTF-8 and refuses what encoding/json lets through
// or silently changes: duplicate object keys, invalid UTF-8, lone UTF-16 surrogates, a byte
// order mark, trailing data. It also refuses what it never accepted (comments, NaN,
// single quotes, trailing commas) with a message naming the mistake. A size and a nesting
// limit bound the work one document can cause.
package jsondoc
