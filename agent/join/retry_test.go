package join

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto/joinwire"
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
		body, err := post(t.Context(), u, srv.Certificate(), joinwire.Request{}, fake)
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
