package qmp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeMessage(t *testing.T) {
	cases := map[string]struct {
		line string
		kind string // greeting, return, error, event; empty when refused
	}{
		"greeting":         {line: `{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian"}, "capabilities": ["oob"]}}`, kind: "greeting"},
		"empty return":     {line: `{"return": {}, "id": 1}`, kind: "return"},
		"null return":      {line: `{"return": null, "id": 1}`, kind: "return"},
		"return":           {line: `{"return": {"status": "running", "running": true}, "id": 2}`, kind: "return"},
		"error":            {line: `{"error": {"class": "GenericError", "desc": "The bootindex 1 has already been used"}, "id": 3}`, kind: "error"},
		"event":            {line: `{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "RESET", "data": {"guest": false, "reason": "host-qmp-system-reset"}}`, kind: "event"},
		"nothing":          {line: `{"id": 1}`},
		"two kinds":        {line: `{"return": {}, "event": "STOP"}`},
		"two values":       {line: `{"return": {}} {"return": {}}`},
		"not an object":    {line: `[1, 2]`},
		"not JSON":         {line: `QEMU 7.2.22 monitor - type 'help' for more information`},
		"truncated":        {line: `{"return": {"status": "runn`},
		"error not object": {line: `{"error": "boom"}`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := decodeMessage([]byte(tc.line))
			if tc.kind == "" {
				if err == nil {
					t.Fatalf("decoded %+v, want an error", m)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := kind(m); got != tc.kind {
				t.Fatalf("kind %s, want %s", got, tc.kind)
			}
		})
	}
}

func kind(m message) string {
	switch {
	case m.Greeting != nil:
		return "greeting"
	case m.Return != nil:
		return "return"
	case m.Error != nil:
		return "error"
	default:
		return "event"
	}
}

// transcript is what qemu 7.2 sent in one session, CRLF-ended as qemu ends lines.
const transcript = "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 22, \"minor\": 2, \"major\": 7}, \"package\": \"Debian 1:7.2+dfsg-7+deb12u18+b3\"}, \"capabilities\": [\"oob\"]}}\r\n" +
	"{\"return\": {}, \"id\": 1}\r\n" +
	"{\"timestamp\": {\"seconds\": 1795938872, \"microseconds\": 364022}, \"event\": \"RESET\", \"data\": {\"guest\": false, \"reason\": \"host-qmp-system-reset\"}}\r\n" +
	"{\"return\": {}, \"id\": 2}\r\n" +
	"\r\n" +
	"{\"error\": {\"class\": \"GenericError\", \"desc\": \"Device does not have a block device backend\"}, \"id\": 3}\r\n"

func TestReader(t *testing.T) {
	r := newReader(strings.NewReader(transcript))
	var kinds []string
	for {
		m, err := r.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, kind(m))
	}
	if diff := cmp.Diff([]string{"greeting", "return", "event", "return", "error"}, kinds); diff != "" {
		t.Fatalf("kinds (-want +got):\n%s", diff)
	}
	long := newReader(io.MultiReader(strings.NewReader(`{"return": "`), bytes.NewReader(bytes.Repeat([]byte("x"), maxLine)), strings.NewReader("\"}\n")))
	if _, err := long.next(); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("a line over the bound: %v", err)
	}
	cut := newReader(strings.NewReader(`{"return": {}`))
	if _, err := cut.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a stream cut in a line: %v", err)
	}
}

// FuzzReader feeds byte streams to the QMP reader: nothing may panic, a stream always
// ends in an error, and every message read is of exactly one kind.
func FuzzReader(f *testing.F) {
	f.Add([]byte(transcript))
	f.Add([]byte("{\"return\": [{\"qdev\": \"cd0\", \"inserted\": {\"file\": \"/a.iso\", \"image\": {\"virtual-size\": 4096}}}], \"id\": 4}\n"))
	f.Add([]byte("{\"event\": \"\"}\n{\"QMP\": null}\n{\"return\": null}\n"))
	f.Add([]byte("\n\n\r\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newReader(bytes.NewReader(data))
		for range len(data) + 1 {
			m, err := r.next()
			if err != nil {
				return
			}
			n := 0
			for _, present := range []bool{m.Greeting != nil, m.Return != nil, m.Error != nil, m.Event != ""} {
				if present {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("message of %d kinds: %+v", n, m)
			}
		}
		t.Fatal("the reader returned more messages than there are bytes")
	})
}
