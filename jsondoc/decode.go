package jsondoc

import (
	"encoding/json"
	"errors"
	"reflect"
	"unicode/utf8"

	"github.com/better-compute/better-compute/proto"
)

// Decoder is the project's one strict JSON decoder: Parse's RFC 8259 JSON without
// duplicate keys, whose keys name the fields of the value decoded into exactly, each
// value of its field's JSON type (Report.Shape), then encoding/json's decoding. The zero
// value decodes a request body.
type Decoder struct {
	// Name names the document in messages: a file's path, or what the document is ("the
	// body", "the site config"); "the document" when empty.
	Name string
	// File says Name is a file's path: every message then starts NAME:LINE:COLUMN, and
	// a problem of the file as a whole is at WholeFile.
	File bool
	// Code is the code of a problem; INVALID_INPUT when empty (INVALID_CONFIG suits an
	// operator's file).
	Code proto.Code
	// Limits bound the parse; DefaultLimits when zero.
	Limits Limits
	// At is where the document stands inside the one it came in (a step's "with", a
	// binding's "drivers.power.config"): every path is under it.
	At Path
}

// WholeFile is the path of a problem of a file as a whole (its text is not JSON, or not
// the object it should be), so that every problem of a file names a path, as an
// operator's files' problems are printed: NAME: MESSAGE, then at: PATH.
const WholeFile Path = "."

// DefaultLimits bound a document no caller limits otherwise: 16 MiB, nested 64 deep.
var DefaultLimits = Limits{MaxBytes: 16 << 20, MaxDepth: 64}

// Decode decodes data, one JSON document, into v. A problem is a *proto.Error of d.Code
// whose details.path names the offending field (the first in document order), and whose
// message says where in the file it is when d.File.
func (d Decoder) Decode(data []byte, v any) error {
	lim := d.Limits
	if lim == (Limits{}) {
		lim = DefaultLimits
	}
	root, perr := Parse(data, lim)
	if perr != nil {
		if d.File {
			return d.errorf(perr.Path, "%s:%d:%d: not acceptable JSON: %s", d.name(), perr.Line, perr.Column, perr.Msg)
		}
		return d.errorf(perr.Path, "%s is not acceptable JSON: %s", d.name(), perr.Error())
	}
	var r Report
	r.Shape(root, "", reflect.TypeOf(v))
	if r.Len() > 0 {
		first := r.Problems()[0]
		if d.File {
			line, col := Position(data, first.Offset)
			return d.errorf(first.Path, "%s:%d:%d: %s", d.name(), line, col, first.Message)
		}
		return d.errorf(first.Path, "%s", first.Message)
	}
	if err := json.Unmarshal(data, v); err != nil {
		// Only a type that decodes itself can fail here; its error names no Go type.
		if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && typeErr.Field != "" {
			return d.errorf(Path(typeErr.Field), "%s: %w", d.name(), typeError{typeErr})
		}
		return d.errorf("", "%s: %v", d.name(), err)
	}
	return nil
}

func (d Decoder) name() string {
	if d.Name == "" {
		return "the document"
	}
	return d.Name
}

func (d Decoder) errorf(p Path, format string, args ...any) *proto.Error {
	code := d.Code
	if code == "" {
		code = proto.InvalidInput
	}
	at := d.At.Under(p)
	if at == "" && d.File {
		at = WholeFile
	}
	return proto.Errorf(code, format, args...).WithPath(string(at))
}

// Position is the line and column (in characters), counting from 1, of the byte offset
// off of data.
func Position(data []byte, off int) (line, column int) {
	line, column = 1, 1
	for i := 0; i < off && i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == '\n' {
			line, column = line+1, 1
		} else {
			column++
		}
		i += n
	}
	return line, column
}

// typeError says which field cannot take its value. It wraps encoding/json's error, which
// names the Go type, for a caller that adds a hint of its own (errors.AsType).
type typeError struct{ err *json.UnmarshalTypeError }

func (e typeError) Error() string { return e.err.Field + " cannot be " + e.err.Value }
func (e typeError) Unwrap() error { return e.err }
