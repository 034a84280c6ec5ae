package join

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/testkit"
)

// TestBusyRegistryRetriedOnTheClock: a join a busy registry refuses (UNAVAILABLE with
// Retry-After) is sent again once Retry-After has passed on the join's clock, not the
// system's.
func TestBusyRegistryRetriedOnTheClock(t *testing.T) {
	requests := make(chan string, 2)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests <- r.URL.Path
		if len(requests) == 1 {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"code":"UNAVAILABLE","message":"busy"}`))
			return
		}
		w.Write([]byte(`joined`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	fake := clock.NewFake(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC))
	type answer struct {
		body []byte
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		body, err := post(t.Context(), u, srv.Certificate(), joinwire.Request{}, fake, nil)
		done <- answer{body, err}
	}()
	waiting := make(chan struct{})
	go func() { fake.BlockUntil(1); close(waiting) }()
	select {
	case <-waiting:
	case a := <-done:
		t.Fatalf("the join ended (%q, %v) without waiting on its clock", a.body, a.err)
	}
	fake.Advance(6 * time.Second)
	if len(requests) != 1 {
		t.Fatalf("%d requests before Retry-After passed on the join's clock, want 1", len(requests))
	}
	fake.Advance(time.Second)
	if a := <-done; a.err != nil || string(a.body) != "joined" || len(requests) != 2 {
		t.Fatalf("answer %q, %v after %d requests; want the second request's", a.body, a.err, len(requests))
	}
}

// TestBusyRegistryGivenUpSaysWhatToDo: a registry that refuses every join source-failures
// (Retry-After: 2) is sent the join 21 times, each wait logged at Info with its attempt,
// seconds and reason; then bcd join gives up with the registry's code and reason, saying
// that the token is unspent, what holds the address back and what to do.
func TestBusyRegistryGivenUpSaysWhatToDo(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"code":"UNAVAILABLE","message":"too many failed credential checks came from 192.0.2.7","details":{"reason":"source-failures"}}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	fake := clock.NewFake(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC))
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	done := make(chan error, 1)
	go func() {
		_, err := post(t.Context(), u, srv.Certificate(), joinwire.Request{}, fake, log)
		done <- err
	}()
	for range busyRetries {
		fake.BlockUntil(1)
		fake.Advance(2 * time.Second)
	}
	err := <-done
	if got := requests.Load(); got != busyRetries+1 {
		t.Errorf("%d requests, want %d", got, busyRetries+1)
	}
	waits := regexp.MustCompile(`level=INFO msg="the registry refused the join for now: bcd join waits, then sends it again" attempt=(\d+) of=21 waitSeconds=2 code=UNAVAILABLE reason=source-failures `).
		FindAllStringSubmatch(logs.String(), -1)
	if len(waits) != busyRetries || waits[0][1] != "1" || waits[busyRetries-1][1] != "20" {
		t.Errorf("logged %d waits, want %d numbered 1 to 20:\n%s", len(waits), busyRetries, logs.String())
	}
	e := proto.AsError(err)
	if e.Code != proto.Unavailable || e.Details.Reason != proto.ReasonSourceFailures {
		t.Fatalf("gave up with %v, want UNAVAILABLE source-failures", err)
	}
	for _, want := range []string{"21 times in a row", "192.0.2.7", "The token is unspent: run bcd join again with it later", "serve --auth-failure-burst"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("the error %q does not say %q", e.Message, want)
		}
	}
}
