package proto

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func frame(payload string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
}

func TestReadFrame(t *testing.T) {
	cases := map[string]struct {
		in   []byte
		want string
		err  error
	}{
		"one frame":         {in: frame(`{"type":"ack"}`), want: `{"type":"ack"}`},
		"empty payload":     {in: frame(""), want: ""},
		"clean end":         {in: nil, err: io.EOF},
		"short header":      {in: []byte{0, 0}, err: io.ErrUnexpectedEOF},
		"short payload":     {in: frame("abcdef")[:7], err: io.ErrUnexpectedEOF},
		"header only":       {in: frame("abc")[:4], err: io.ErrUnexpectedEOF},
		"too large":         {in: binary.BigEndian.AppendUint32(nil, MaxFrame+1), err: ErrFrameTooLarge},
		"largest announced": {in: binary.BigEndian.AppendUint32(nil, MaxFrame), err: io.ErrUnexpectedEOF},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ReadFrame(bytes.NewReader(tc.in))
			if !errors.Is(err, tc.err) {
				t.Fatalf("error: got %v, want %v", err, tc.err)
			}
			if err == nil && string(got) != tc.want {
				t.Fatalf("payload: got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMessageRoundTrip(t *testing.T) {
	msgs := map[string]Message{
		"hello":     {Type: MsgHello, Hello: &Hello{ObservedGeneration: 7, BootID: "3f1c2a9e-6d4b-4e8a-9b7c-0d1e2f3a4b5c", Inventory: map[string]json.RawMessage{"images": json.RawMessage(`[{"digest":"ab"}]`)}}},
		"spec":      {Type: MsgSpec, Spec: &NodeSpec{Node: "n1", Role: RoleNode, Generation: 3, Host: []HostUnit{{Unit: "sysctl", Settings: json.RawMessage(`{"vm.swappiness":1}`)}}}},
		"ack":       {Type: MsgAck, Ack: &Ack{Generation: 3, Error: &Error{Code: DriverError, Message: "unit failed"}}},
		"inventory": {Type: MsgInventory, Inventory: &Inventory{Section: "nics", Data: json.RawMessage(`[]`)}},
		"command":   {Type: MsgCommand, Command: &Command{ID: "c1", Kind: "disk.wipe", Payload: json.RawMessage(`{"disk":"/dev/sda"}`)}},
		"result":    {Type: MsgResult, Result: &Result{ID: "c1", Result: json.RawMessage(`{"ok":true}`)}},
		"request":   {Type: MsgSecretRequest, SecretRequest: &SecretRequest{ID: "secret-1", Ref: "secret://k8s/join"}},
		"secret":    {Type: MsgSecret, Secret: &Secret{ID: "secret-1", Value: []byte("abcdef.0123456789abcdef\n\x00")}},
		"refused":   {Type: MsgSecret, Secret: &Secret{ID: "secret-2", Error: &Error{Code: Forbidden, Message: "not referenced"}}},
		"ping":      {Type: MsgPing},
		"renew":     {Type: MsgRenewRequest, RenewRequest: &RenewRequest{ID: "renew-1", PublicKey: []byte{0x30, 0x59, 0x30, 0x13}}},
		"renewal":   {Type: MsgRenewal, Renewal: &Renewal{ID: "renew-1", Certificate: []byte{0x30, 0x82, 0x01, 0x0a}}},
		"no renew":  {Type: MsgRenewal, Renewal: &Renewal{ID: "renew-2", Error: &Error{Code: Forbidden, Message: "revoked"}}},
		"shutdown":  {Type: MsgShutdown, Shutdown: &Shutdown{Reason: ShutdownReason(1500*time.Millisecond, 2*time.Second, 250*time.Millisecond)}},
		"reads it":  {Type: MsgHello, Hello: &Hello{ReadsShutdown: true}},
	}
	order := []string{"hello", "spec", "ack", "inventory", "command", "result", "request", "secret", "refused", "ping", "renew", "renewal", "no renew", "shutdown", "reads it"}
	var stream bytes.Buffer
	for _, name := range order {
		m := msgs[name]
		if err := WriteMessage(&stream, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, name := range order {
		got, err := ReadMessage(&stream)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(msgs[name], got, cmp.AllowUnexported(Error{})); diff != "" {
			t.Errorf("%s (-sent +read):\n%s", name, diff)
		}
	}
	if _, err := ReadMessage(&stream); err != io.EOF {
		t.Fatalf("after the last frame: got %v, want io.EOF", err)
	}
}

// TestPingFrame: PingFrame is the frame WriteMessage writes for a ping, and reads back as
// a ping, so a receiver that takes these bytes for a ping without decoding them agrees
// with one that decodes them.
func TestPingFrame(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMessage(&b, &Message{Type: MsgPing}); err != nil {
		t.Fatal(err)
	}
	if b.String() != PingFrame {
		t.Fatalf("WriteMessage writes a ping as %q, PingFrame is %q", b.String(), PingFrame)
	}
	m, err := ReadMessage(strings.NewReader(PingFrame))
	if err != nil || !cmp.Equal(m, Message{Type: MsgPing}) {
		t.Fatalf("PingFrame reads as %+v, %v", m, err)
	}
}

func TestWriteMessageTooLarge(t *testing.T) {
	big := Message{Type: MsgInventory, Inventory: &Inventory{Section: "s", Data: json.RawMessage(`"` + string(bytes.Repeat([]byte("x"), MaxFrame)) + `"`)}}
	if err := WriteMessage(io.Discard, &big); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
}

func TestDecodeMessage(t *testing.T) {
	cases := map[string]struct {
		in   string
		path string // empty: valid
	}{
		"ack":                       {in: `{"type":"ack","ack":{"generation":2}}`},
		"unknown field":             {in: `{"type":"ack","ack":{"generation":2,"later":1},"extra":true}`},
		"not json":                  {in: `{`, path: "-"},
		"unknown type":              {in: `{"type":"bogus"}`, path: "type"},
		"no body":                   {in: `{"type":"hello"}`, path: "hello"},
		"two bodies":                {in: `{"type":"ack","ack":{},"hello":{}}`, path: "ack"},
		"other body":                {in: `{"type":"ack","hello":{}}`, path: "ack"},
		"hello unnamed section":     {in: `{"type":"hello","hello":{"inventory":{"":1}}}`, path: "hello.inventory"},
		"hello with a boot id":      {in: `{"type":"hello","hello":{"bootId":"3f1c2a9e-6d4b-4e8a-9b7c-0d1e2f3a4b5c"}}`},
		"hello boot id upper case":  {in: `{"type":"hello","hello":{"bootId":"3F1C2A9E-6D4B-4E8A-9B7C-0D1E2F3A4B5C"}}`, path: "hello.bootId"},
		"hello boot id no hyphens":  {in: `{"type":"hello","hello":{"bootId":"3f1c2a9e6d4b4e8a9b7c0d1e2f3a4b5c"}}`, path: "hello.bootId"},
		"hello boot id with a line": {in: `{"type":"hello","hello":{"bootId":"3f1c2a9e-6d4b-4e8a-9b7c-0d1e2f3a4b5c\n"}}`, path: "hello.bootId"},
		"hello boot id not a uuid":  {in: `{"type":"hello","hello":{"bootId":"reboot-me"}}`, path: "hello.bootId"},
		"hello refusals below 0":    {in: `{"type":"hello","hello":{"refusedAttempts":-1}}`, path: "hello.refusedAttempts"},
		"hello boot id a number":    {in: `{"type":"hello","hello":{"bootId":7}}`, path: "-"},
		"inventory unnamed":         {in: `{"type":"inventory","inventory":{"data":1}}`, path: "inventory.section"},
		"inventory name with a dot": {in: `{"type":"inventory","inventory":{"section":"a.b","data":1}}`, path: "inventory.section"},
		"command without id":        {in: `{"type":"command","command":{"kind":"x"}}`, path: "command.id"},
		"command with slash":        {in: `{"type":"command","command":{"id":"a/b","kind":"x"}}`, path: "command.id"},
		"result without id":         {in: `{"type":"result","result":{}}`, path: "result.id"},
		"null body":                 {in: `{"type":"spec","spec":null}`, path: "spec"},
		"spec":                      {in: `{"type":"spec","spec":{"node":"n1","role":"node","generation":1}}`},
		"spec without a generation": {in: `{"type":"spec","spec":{"node":"n1","role":"node"}}`, path: "spec.generation"},
		"spec generation negative":  {in: `{"type":"spec","spec":{"node":"n1","role":"node","generation":-1}}`, path: "spec.generation"},
		"secret request":            {in: `{"type":"secretRequest","secretRequest":{"id":"secret-1","ref":"secret://k8s/join"}}`},
		"request without id":        {in: `{"type":"secretRequest","secretRequest":{"ref":"secret://k8s/join"}}`, path: "secretRequest.id"},
		"request without ref":       {in: `{"type":"secretRequest","secretRequest":{"id":"secret-1"}}`, path: "secretRequest.ref"},
		"secret value":              {in: `{"type":"secret","secret":{"id":"secret-1","value":"dG9rZW4="}}`},
		"secret error":              {in: `{"type":"secret","secret":{"id":"secret-1","error":{"code":"FORBIDDEN","message":"no"}}}`},
		"secret neither":            {in: `{"type":"secret","secret":{"id":"secret-1"}}`, path: "secret"},
		"secret both":               {in: `{"type":"secret","secret":{"id":"secret-1","value":"dG9rZW4=","error":{"code":"FORBIDDEN"}}}`, path: "secret"},
		"secret value not b64":      {in: `{"type":"secret","secret":{"id":"secret-1","value":"!!"}}`, path: "-"},
		"secret without id":         {in: `{"type":"secret","secret":{"value":"dG9rZW4="}}`, path: "secret.id"},
		"ping":                      {in: `{"type":"ping"}`},
		"ping with a body":          {in: `{"type":"ping","ack":{"generation":1}}`, path: "ack"},
		"renew request":             {in: `{"type":"renewRequest","renewRequest":{"id":"renew-1","publicKey":"MFkw"}}`},
		"renew without key":         {in: `{"type":"renewRequest","renewRequest":{"id":"renew-1"}}`, path: "renewRequest.publicKey"},
		"renew without id":          {in: `{"type":"renewRequest","renewRequest":{"publicKey":"MFkw"}}`, path: "renewRequest.id"},
		"renewal":                   {in: `{"type":"renewal","renewal":{"id":"renew-1","certificate":"MIIB"}}`},
		"renewal refused":           {in: `{"type":"renewal","renewal":{"id":"renew-1","error":{"code":"FORBIDDEN","message":"no"}}}`},
		"renewal neither":           {in: `{"type":"renewal","renewal":{"id":"renew-1"}}`, path: "renewal"},
		"renewal without id":        {in: `{"type":"renewal","renewal":{"certificate":"MIIB"}}`, path: "renewal.id"},
		"shutdown":                  {in: `{"type":"shutdown","shutdown":{"reason":"registry shutting down; reconnect in 5ms; stream ends in 9ms; refused retry within 250ms"}}`},
		"shutdown, an older phrase": {in: `{"type":"shutdown","shutdown":{"reason":"registry shutting down; reconnect in 5ms"}}`},
		"shutdown without a moment": {in: `{"type":"shutdown","shutdown":{"reason":"registry shutting down"}}`, path: "shutdown.reason"},
		"shutdown without a reason": {in: `{"type":"shutdown","shutdown":{}}`, path: "shutdown.reason"},
	}
	hello := func(names ...string) string {
		inv := map[string]int{}
		for _, n := range names {
			inv[n] = 1
		}
		b, _ := json.Marshal(map[string]any{"type": "hello", "hello": map[string]any{"inventory": inv}})
		return string(b)
	}
	numbered := func(n int) []string {
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("s%d", i))
		}
		return names
	}
	var reported []string
	for _, sections := range inventorySections {
		reported = append(reported, sections...)
	}
	maps.Copy(cases, map[string]struct {
		in   string
		path string
	}{
		"hello of every section reported":      {in: hello(reported...)},
		"hello of MaxHelloSections sections":   {in: hello(numbered(MaxHelloSections)...)},
		"hello of a section more":              {in: hello(numbered(MaxHelloSections + 1)...), path: "hello.inventory"},
		"hello of 100,000 sections":            {in: hello(numbered(100_000)...), path: "hello.inventory"},
		"hello section name of 64 bytes":       {in: hello("a" + strings.Repeat("B", 63))},
		"hello section name of 65 bytes":       {in: hello("a"+strings.Repeat("B", 64), "host"), path: "hello.inventory"},
		"hello section name of 1 MiB":          {in: hello(strings.Repeat("a", 1<<20)), path: "hello.inventory"},
		"hello section name with a dot":        {in: hello("host", "a.b"), path: "hello.inventory"},
		"hello section name with a slash":      {in: hello("../host"), path: "hello.inventory"},
		"hello section name upper case first":  {in: hello("Host"), path: "hello.inventory"},
		"hello section name with a line":       {in: hello("host\n"), path: "hello.inventory"},
		"hello section name with -, _, digits": {in: hello("gpu-topology_2")},
	})
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeMessage([]byte(tc.in))
			if tc.path == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			e, ok := errors.AsType[*Error](err)
			if !ok || e.Code != InvalidInput {
				t.Fatalf("got %v, want INVALID_INPUT", err)
			}
			if tc.path != "-" && e.Details.Path != tc.path {
				t.Fatalf("path: got %q, want %q", e.Details.Path, tc.path)
			}
		})
	}
}

// FuzzReadFrame feeds arbitrary bytes to the frame reader: it never panics, never returns
// more than MaxFrame, and a frame it accepts is read back whole.
func FuzzReadFrame(f *testing.F) {
	f.Add(frame(`{"type":"ack","ack":{"generation":1}}`))
	f.Add(append(frame("a"), frame("bc")...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for {
			b, err := ReadFrame(r)
			if err != nil {
				return
			}
			if len(b) > MaxFrame {
				t.Fatalf("frame of %d bytes", len(b))
			}
			if rest := in[len(in)-r.Len()-len(b):]; !bytes.HasPrefix(rest, b) {
				t.Fatalf("payload is not the bytes after the header")
			}
		}
	})
}

// FuzzDecodeMessage feeds arbitrary payloads to the message decoder: it never panics, and
// a message it accepts carries exactly the body of its type and encodes back to one it
// accepts again.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"hello","hello":{"observedGeneration":3,"inventory":{"images":[]}}}`,
		`{"type":"hello","hello":{"observedGeneration":3,"bootId":"3f1c2a9e-6d4b-4e8a-9b7c-0d1e2f3a4b5c"}}`,
		`{"type":"hello","hello":{"bootId":"3f1c2a9e-6d4b-4e8a-9b7c-0d1e2f3a4b5"}}`,
		`{"type":"spec","spec":{"node":"n1","role":"site","generation":2,"site":{"bootEntries":[{"node":"m1","macs":["52:54:00:00:00:01"],"kind":"disk"}]}}}`,
		`{"type":"ack","ack":{"generation":2,"error":{"code":"DRIVER_ERROR","message":"x"}}}`,
		`{"type":"inventory","inventory":{"section":"nics","data":{}}}`,
		`{"type":"command","command":{"id":"c-1","kind":"disk.wipe","payload":{}}}`,
		`{"type":"result","result":{"id":"c-1","result":null}}`,
		`{"type":"ack","hello":{}}`,
		`{"type":"secretRequest","secretRequest":{"id":"secret-1","ref":"secret://k8s/prod-join"}}`,
		`{"type":"secret","secret":{"id":"secret-1","value":"YWJjZGVmLjAxMjM0NTY3ODlhYmNkZWY="}}`,
		`{"type":"secret","secret":{"id":"secret-2","error":{"code":"NOT_FOUND","message":"x"}}}`,
		`{"type":"secret","secret":{"id":"secret-3","value":"","error":null}}`,
		`{"type":"ping"}`,
		`{"type":"renewRequest","renewRequest":{"id":"renew-1","publicKey":"MFkwEwYHKoZIzj0CAQ=="}}`,
		`{"type":"renewal","renewal":{"id":"renew-1","certificate":"MIIBkTCCATeg"}}`,
		`{"type":"renewal","renewal":{"id":"renew-2","error":{"code":"FORBIDDEN","message":"revoked"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := DecodeMessage(in)
		if err != nil {
			if CodeOf(err) != InvalidInput {
				t.Fatalf("error of code %s: %v", CodeOf(err), err)
			}
			return
		}
		if m.Spec != nil && m.Spec.Generation < 1 {
			t.Fatalf("accepted a spec of generation %d, which no ack can name", m.Spec.Generation)
		}
		if m.Hello != nil && m.Hello.BootID != "" && len(m.Hello.BootID) != 36 {
			t.Fatalf("accepted a hello of boot id %q, which is no UUID", m.Hello.BootID)
		}
		if m.Hello != nil && len(m.Hello.Inventory) > MaxHelloSections {
			t.Fatalf("accepted a hello of %d sections", len(m.Hello.Inventory))
		}
		if m.Hello != nil {
			for name := range m.Hello.Inventory {
				if len(name) > 64 || strings.ContainsAny(name, "./\x00") {
					t.Fatalf("accepted a hello of a section named %q", name)
				}
			}
		}
		var buf bytes.Buffer
		if err := WriteMessage(&buf, &m); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := ReadMessage(&buf); err != nil {
			t.Fatalf("re-read: %v", err)
		}
	})
}
