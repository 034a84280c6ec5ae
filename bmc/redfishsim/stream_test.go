package redfishsim_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/bmc/redfishsim"
)

// TestStreamClientGoneGetsNothing asks the simulated BMC for a stalled answer and a
// trickled one, then goes away as Go's HTTP client does when its request's context ends:
// a TLS close_notify first, the connection closed a moment later. In that moment the
// client still reads what comes: the stalled answer must send nothing at all, and the
// trickled one must not end its chunked body. On the code before, the server finished
// both answers once it saw the client go (an empty 200; a body ended after its head),
// and the driver's client, under the race detector, took the empty 200 for the service
// root's answer: TestStalledBMCBounded failed with DRIVER_ERROR where it wants TIMEOUT.
func TestStreamClientGoneGetsNothing(t *testing.T) {
	cases := map[string]struct {
		stream redfishsim.Stream
		// sent is what may come before the client goes: nothing, or the status line and
		// the head's chunk.
		sent string
	}{
		"no headers": {redfishsim.Stream{Delay: time.Hour}, ""},
		"trickled":   {redfishsim.Stream{Head: []byte(`{"Id":"`), Unit: []byte("a"), Size: -1, Every: time.Hour}, "HTTP/1.1 200 OK"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sim := redfishsim.New(redfishsim.Config{})
			defer sim.Close()
			sim.AnswerStream(http.MethodGet, "/redfish/v1/", http.StatusOK, tc.stream)
			roots := x509.NewCertPool()
			roots.AddCert(sim.Certificate)
			conn, err := tls.Dial("tcp", strings.TrimPrefix(sim.URL, "https://"), &tls.Config{RootCAs: roots})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "GET /redfish/v1/ HTTP/1.1\r\nHost: bmc\r\nAccept: application/json\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			var got []byte
			if tc.sent != "" {
				// The head, flushed before the first unit's wait: the answer has begun.
				conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 4096)
				for !bytes.Contains(got, []byte(`{"Id":"`)) {
					n, err := conn.Read(buf)
					if err != nil {
						t.Fatalf("reading the answer's start: %v (read %q)", err, got)
					}
					got = append(got, buf[:n]...)
				}
			}
			if err := conn.CloseWrite(); err != nil { // the close_notify
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			rest, err := io.ReadAll(conn)
			got = append(got, rest...)
			if err != nil && !strings.Contains(err.Error(), "connection reset") && !strings.Contains(err.Error(), "EOF") {
				t.Fatalf("reading after the close_notify: %v (read %q)", err, got)
			}
			switch {
			case tc.sent == "" && len(got) > 0:
				t.Errorf("the server answered a client that went away: %q; want nothing", got)
			case tc.sent != "" && !bytes.HasPrefix(got, []byte(tc.sent)):
				t.Errorf("the answer began %q, want %q", got, tc.sent)
			case bytes.HasSuffix(got, []byte("0\r\n\r\n")):
				t.Errorf("the server ended the chunked body of a client that went away: %q; want it cut off", got)
			}
		})
	}
}
