package metricshttp

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// TestServeAnswersGetMetricsOnly: on a real loopback listener, GET /metrics is the
// handler's answer, without a credential; another path is 404 and another method 405,
// neither reaching the handler; an address taken is INVALID_CONFIG at the path given;
// after stop, the address takes no connection.
func TestServeAnswersGetMetricsOnly(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	var calls atomic.Int32
	addr, stop, err := Serve("127.0.0.1:0", "--metrics-listen", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.WriteString(w, "up 1\n")
	}), log)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr.String()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "up 1\n" {
		t.Errorf("GET /metrics: %s %q", resp.Status, body)
	}
	for _, tc := range []struct {
		method, path string
		status       int
	}{{http.MethodGet, "/", http.StatusNotFound}, {http.MethodGet, "/metrics/x", http.StatusNotFound}, {http.MethodPost, "/metrics", http.StatusMethodNotAllowed}} {
		req, _ := http.NewRequest(tc.method, url+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %s, want %d", tc.method, tc.path, resp.Status, tc.status)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler was called %d times, want once", n)
	}
	if _, _, err := Serve(addr.String(), "metricsListen", http.NotFoundHandler(), log); proto.CodeOf(err) != proto.InvalidConfig || proto.AsError(err).Details.Path != "metricsListen" {
		t.Errorf("an address taken: %v, want INVALID_CONFIG at metricsListen", err)
	}
	stop()
	if c, err := net.Dial("tcp", addr.String()); err == nil {
		c.Close()
		t.Errorf("%s takes connections after stop", addr)
	}
}
