// Package proto holds what every part of better-compute shares on the wire: the error
// model, the agent-plane messages and their framing, the NodeSpec and inventory sections.
package proto

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Code is the machine-readable class of an error. The set is closed: every error that
// crosses a process boundary carries exactly one of these.
type Code string

// The error codes. Their meaning is the contract with operators and scripts.
const (
	// InvalidConfig: a profile, template or configuration given to code is malformed.
	InvalidConfig Code = "INVALID_CONFIG"
	// InvalidInput: a request's input is malformed (the API's face of INVALID_CONFIG).
	InvalidInput Code = "INVALID_INPUT"
	// NotFound: the named object does not exist or the caller may not see it.
	NotFound Code = "NOT_FOUND"
	// Conflict: the object exists already, or a guard (--if-version) did not hold.
	Conflict Code = "CONFLICT"
	// InvalidState: the object exists but is in a state that forbids the operation.
	InvalidState Code = "INVALID_STATE"
	// Unauthenticated: no credential, one the registry does not know, or one expired or
	// revoked.
	Unauthenticated Code = "UNAUTHENTICATED"
	// Forbidden: the credential is valid but lacks the action the method needs.
	Forbidden Code = "FORBIDDEN"
	// DriverError: a driver (BMC, disk, agent step) failed; the message is the driver's own.
	DriverError Code = "DRIVER_ERROR"
	// Unsupported: the operation is not available for this target or hardware.
	Unsupported Code = "UNSUPPORTED"
	// UnverifiedWipe: a disk wipe could not be attested, so the node may not be released.
	UnverifiedWipe Code = "UNVERIFIED_WIPE"
	// Timeout: a step or call ran out of time.
	Timeout Code = "TIMEOUT"
	// Unavailable: the registry cannot take the call now: it is too busy (try again
	// after the Retry-After the answer gives), or a client cannot reach it (connection
	// refused, no answer in time, no admin socket): start it, or fix the address; or the
	// registry's etcd cluster did not answer (a write's outcome is then unknown: read it
	// back before trying again).
	Unavailable Code = "UNAVAILABLE"
	// Internal: a bug or an unexpected failure of the registry itself.
	Internal Code = "INTERNAL"
)

// Codes lists every code, in the order the documentation gives them.
var Codes = []Code{InvalidConfig, InvalidInput, NotFound, Conflict, InvalidState,
	Unauthenticated, Forbidden, DriverError, Unsupported, UnverifiedWipe, Timeout, Unavailable, Internal}

// HTTPStatus is the status the API answers with for an error of this code.
func (c Code) HTTPStatus() int {
	switch c {
	case InvalidConfig, InvalidInput:
		return http.StatusBadRequest
	case NotFound:
		return http.StatusNotFound
	case Conflict:
		return http.StatusConflict
	case InvalidState, UnverifiedWipe:
		return http.StatusUnprocessableEntity
	case Unauthenticated:
		return http.StatusUnauthorized
	case Forbidden:
		return http.StatusForbidden
	case DriverError:
		return http.StatusBadGateway
	case Unsupported:
		return http.StatusNotImplemented
	case Timeout:
		return http.StatusGatewayTimeout
	case Unavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// Details carries the optional, machine-readable context of an error.
type Details struct {
	// Path names the offending field, for example "steps[2].timeout".
	Path string `json:"path,omitempty"`
	// Reason is a stable machine-readable reason, for example "signature".
	Reason string `json:"reason,omitempty"`
	// Failed lists what failed in a result the registry judged, for example the
	// diag.dcgm tests that failed and their GPUs.
	Failed []Failure `json:"failed,omitempty"`
}

// Failure is one failed check of a judged result: its name, and the GPUs (by index)
// it failed on, if it concerns GPUs.
type Failure struct {
	Name string `json:"name"`
	GPUs []int  `json:"gpus,omitempty"`
}

// Error is the one error shape of the project: {code, message, details}.
type Error struct {
	Code    Code    `json:"code"`
	Message string  `json:"message"`
	Details Details `json:"details,omitzero"`
	// cause is the wrapped error, if any; it never crosses the wire.
	cause error
}

func (e *Error) Error() string {
	s := string(e.Code) + ": " + e.Message
	if e.Details.Path != "" {
		s += " (at " + e.Details.Path + ")"
	}
	return s
}

// Unwrap returns the error this one wraps.
func (e *Error) Unwrap() error { return e.cause }

// Is makes errors.Is(err, &Error{Code: c}) match any error of code c.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// Errorf makes an error of the given code with a formatted message. A %w verb wraps. A
// string argument formatted with %q is quoted by Quote, so that an error never echoes
// more than a short prefix of an input.
func Errorf(code Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, quoteInputs(args)...)
	return &Error{Code: code, Message: err.Error(), cause: errors.Unwrap(err)}
}

// Sprintf is fmt.Sprintf, but a string argument formatted with %q is quoted by Quote, as
// Errorf does: for messages made elsewhere that end up in an error.
func Sprintf(format string, args ...any) string {
	return fmt.Sprintf(format, quoteInputs(args)...)
}

// quoteInputs returns args with each string made an input: a string of a type of its
// own too (an image kind, a format, as a request names it), unless the type formats
// itself.
func quoteInputs(args []any) []any {
	quoted := make([]any, len(args))
	for i, a := range args {
		switch a.(type) {
		case fmt.Formatter, fmt.Stringer, error:
		default:
			if v := reflect.ValueOf(a); v.Kind() == reflect.String {
				a = input(v.String())
			}
		}
		quoted[i] = a
	}
	return quoted
}

// MaxQuoted is the most of an input that an error message quotes: bytes of its quoted
// form, between the quotes (an invalid byte quoted as \xe0 counts four).
const MaxQuoted = 128

// Quote is s quoted for a message as %q quotes it, cut (at a character boundary, with an
// ellipsis) where its quoted form would pass MaxQuoted bytes.
func Quote(s string) string {
	q := strconv.Quote(s)
	if len(q) <= MaxQuoted+2 {
		return q
	}
	cut, width := 0, 0
	for cut < len(s) {
		_, size := utf8.DecodeRuneInString(s[cut:])
		w := len(strconv.Quote(s[cut:cut+size])) - 2
		if width+w > MaxQuoted {
			break
		}
		cut, width = cut+size, width+w
	}
	return strconv.Quote(s[:cut] + "…")
}

// input is a string argument of Errorf: %q quotes it with Quote, every other verb formats
// it as the string it is.
type input string

func (s input) Format(f fmt.State, verb rune) {
	if verb == 'q' && !f.Flag('#') && !f.Flag('+') {
		io.WriteString(f, Quote(string(s)))
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), string(s))
}

// WithPath returns a copy of e naming the offending field.
func (e *Error) WithPath(path string) *Error {
	c := *e
	c.Details.Path = path
	return &c
}

// WithReason returns a copy of e with a machine-readable reason.
func (e *Error) WithReason(reason string) *Error {
	c := *e
	c.Details.Reason = reason
	return &c
}

// WithFailed returns a copy of e listing what failed.
func (e *Error) WithFailed(failed []Failure) *Error {
	c := *e
	c.Details.Failed = failed
	return &c
}

// WithCode returns a copy of e with another code, for example INVALID_CONFIG turned into
// INVALID_INPUT when a profile problem reaches the API.
func (e *Error) WithCode(code Code) *Error {
	c := *e
	c.Code = code
	return &c
}

// MaxErrorMessage is the most of an error's message the registry keeps (Cut) of an
// error that comes from elsewhere: an agent's error carries whatever text it likes, up
// to its frame.
const MaxErrorMessage = 1 << 10

// Cut returns e with its message cut to limit bytes (at a character boundary, saying
// how much was cut), and its details in proportion: its path and reason to limit/4
// bytes, the failures it lists to limit/64 of limit/16 GPUs each (at most 256 bytes and
// 64 GPUs); e itself when it is within them, nil for nil. A code that is none of Codes
// (an agent's error carries whatever code it likes) is taken as DRIVER_ERROR, the code
// it had quoted at the message's start: every error the registry keeps or answers has
// one of the project's codes.
func (e *Error) Cut(limit int) *Error {
	if e == nil {
		return nil
	}
	field, failed, gpus := min(limit/4, 256), limit/64, min(limit/16, 64)
	known := slices.Contains(Codes, e.Code)
	within := known && len(e.Message) <= limit && len(e.Details.Path) <= field && len(e.Details.Reason) <= field && len(e.Details.Failed) <= failed
	for _, f := range e.Details.Failed {
		within = within && len(f.Name) <= field && len(f.GPUs) <= gpus
	}
	if within {
		return e
	}
	c := *e
	if !known {
		c.Code, c.Message = DriverError, Sprintf("code %q is none of the project's: %s", string(e.Code), e.Message)
	}
	c.Message = cutText(c.Message, limit)
	c.Details.Path, c.Details.Reason = cutText(e.Details.Path, field), cutText(e.Details.Reason, field)
	c.Details.Failed = nil
	for _, f := range e.Details.Failed[:min(len(e.Details.Failed), failed)] {
		c.Details.Failed = append(c.Details.Failed, Failure{Name: cutText(f.Name, field), GPUs: f.GPUs[:min(len(f.GPUs), gpus)]})
	}
	return &c
}

// cutNote is room for the note of a cut: "… (N bytes cut)", N of up to 10 digits.
const cutNote = 26

// cutText is s cut to at most limit bytes at a character boundary, ending with how
// many bytes were cut; s when it is within limit.
func cutText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	keep := max(limit-cutNote, 0)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf("… (%d bytes cut)", len(s)-keep)
}

// CodeOf returns the code of err: its own if it is (or wraps) an *Error, else INTERNAL;
// none ("", of no code in Codes) when err is nil, so that a check of a code never takes
// an error that was never returned for an INTERNAL one.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return Internal
}

// AsError returns err as an *Error, wrapping any other error as INTERNAL. A nil err is
// an *Error of no code (none of Codes) whose message says there was none: a check of its
// code, path or reason fails, as it should of an error that was never returned, where a
// nil *Error would panic in the check (a test's, whose defect is that very nil). It is
// never an error to return or send: the callers that do check err first.
func AsError(err error) *Error {
	if err == nil {
		return &Error{Message: "no error"}
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	return &Error{Code: Internal, Message: err.Error(), cause: err}
}

// Joined is every error err joins (errors.Join, nested joins flattened), in order; err
// alone when it joins none, and none when err is nil.
func Joined(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, Joined(e)...)
	}
	return out
}
