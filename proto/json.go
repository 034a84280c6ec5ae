package proto

import (
	"bytes"
	"encoding/json"
	"io"
)

// Marshal is v's JSON as the project sends and stores it: encoding/json's, except that
// <, > and & stay as they are. json.Marshal writes each of them in six bytes (\u003c),
// for HTML pages, which none of ours are: a profile document of 1 MiB of them became a
// request of 6 MiB, over the API's bound. A MarshalJSON method that writes text must use
// Marshal too, as an Encoder does not undo the escaping a method wrote.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := NewEncoder(&buf).Encode(v); err != nil {
		return nil, err
	}
	// Encode ends the text with a line break, which Marshal does not write.
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// NewEncoder is json.NewEncoder writing to w without escaping <, > and & (Marshal).
func NewEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}
