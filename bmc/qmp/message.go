package qmp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxLine bounds one message: QEMU's answers here (query-block, query-cpus-fast) are a
// few kilobytes; anything near a megabyte is not a QMP server talking.
const maxLine = 1 << 20

// message is one line a QMP server sends: exactly one of its greeting, a command's
// return, a command's error, or an event.
type message struct {
	Greeting json.RawMessage `json:"QMP"`
	Return   json.RawMessage `json:"return"`
	Error    *commandError   `json:"error"`
	Event    string          `json:"event"`
	// ID echoes the id of the command a return or error answers.
	ID json.RawMessage `json:"id"`
}

// commandError is QEMU's refusal of a command.
type commandError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *commandError) Error() string { return e.Desc }

// decodeMessage parses one line, refusing anything but a single JSON object of one
// kind.
func decodeMessage(line []byte) (message, error) {
	var m message
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&m); err != nil {
		return message{}, fmt.Errorf("QMP message is not a JSON object: %w", err)
	}
	if dec.More() {
		return message{}, errors.New("QMP message holds more than one JSON value")
	}
	kinds := 0
	for _, present := range []bool{m.Greeting != nil, m.Return != nil, m.Error != nil, m.Event != ""} {
		if present {
			kinds++
		}
	}
	if kinds != 1 {
		return message{}, fmt.Errorf("QMP message %.80q is not one of a greeting, a return, an error or an event", line)
	}
	return m, nil
}

// reader reads the messages of a QMP stream: one JSON object a line, CRLF or LF ended.
type reader struct {
	r *bufio.Reader
}

func newReader(r io.Reader) *reader { return &reader{r: bufio.NewReaderSize(r, 64<<10)} }

// next returns the next message, skipping blank lines.
func (r *reader) next() (message, error) {
	for {
		var line []byte
		for {
			chunk, err := r.r.ReadSlice('\n')
			line = append(line, chunk...)
			if len(line) > maxLine {
				return message{}, fmt.Errorf("QMP message longer than %d bytes", maxLine)
			}
			if err == nil {
				break
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				if errors.Is(err, io.EOF) && len(line) > 0 {
					err = io.ErrUnexpectedEOF
				}
				return message{}, err
			}
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			return decodeMessage(line)
		}
	}
}
