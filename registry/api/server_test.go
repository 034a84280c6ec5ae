package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// call posts body to method on srv and returns the status, the Retry-After header and the
// error answered.
func call(t *testing.T, srv *httptest.Server, method, contentType, body string) (int, string, proto.Error) {
	t.Helper()
	resp, err := http.Post(srv.URL+"/v1/"+method, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var e proto.Error
	if resp.StatusCode != http.StatusOK {
		if err := json.Unmarshal(data, &e); err != nil {
			t.Fatalf("answer %s: %v", data, err)
		}
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), e
}

func TestPublicCallsBeyondTheBoundAreUnavailable(t *testing.T) {
	s := NewServer(nil, slog.New(slog.DiscardHandler))
	inside, release := make(chan struct{}), make(chan struct{})
	s.Register("test.hold", Method{Public: true, Call: func(ctx context.Context, _ *Caller, _ []byte) (any, error) {
		inside <- struct{}{}
		<-release
		return struct{}{}, nil
	}})
	srv := httptest.NewServer(s)
	defer srv.Close()
	var held sync.WaitGroup
	for range maxPublic {
		held.Go(func() {
			if status, _, e := call(t, srv, "test.hold", "application/json", "{}"); status != http.StatusOK {
				t.Errorf("a call within the bound: %d %+v", status, e)
			}
		})
		<-inside
	}
	status, retry, e := call(t, srv, "test.hold", "application/json", "{}")
	if status != http.StatusServiceUnavailable || e.Code != proto.Unavailable || retry != "1" {
		t.Errorf("one call over the bound: %d, Retry-After %q, %+v", status, retry, e)
	}
	close(release)
	held.Wait()
	go func() { <-inside }()
	if status, _, e := call(t, srv, "test.hold", "application/json", "{}"); status != http.StatusOK {
		t.Errorf("a call once the others are done: %d %+v", status, e)
	}
}

func TestBodiesOverTheirMethodsLimitAreRefused(t *testing.T) {
	s := NewServer(nil, slog.New(slog.DiscardHandler))
	s.Register("test.small", Method{Public: true, MaxBody: 100, Call: func(context.Context, *Caller, []byte) (any, error) { return struct{}{}, nil }})
	srv := httptest.NewServer(s)
	defer srv.Close()
	if status, _, e := call(t, srv, "test.small", "application/json", `{"a":"`+strings.Repeat("x", 92)+`"}`); status != http.StatusOK {
		t.Errorf("a body of 100 bytes: %d %+v", status, e)
	}
	status, _, e := call(t, srv, "test.small", "application/json", `{"a":"`+strings.Repeat("x", 93)+`"}`)
	if status != http.StatusRequestEntityTooLarge || e.Code != proto.InvalidInput || !strings.Contains(e.Message, "over 100 bytes") {
		t.Errorf("a body of 101 bytes: %d %+v", status, e)
	}
	status, _, e = call(t, srv, strings.Repeat("m", 10000), "application/json", "{}")
	if status != http.StatusNotFound || len(e.Message) > 200 {
		t.Errorf("an unknown method of 10,000 bytes: %d, a message of %d bytes", status, len(e.Message))
	}
}

// seen is a RequestObserver recording the labels it is given.
type seen struct {
	mu    sync.Mutex
	calls []string
}

func (s *seen) APIRequest(method, code string, _ time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, method+" "+code)
}

// TestObserverLabelsStayBounded: the observer (the registry's metrics) is told of every
// call with its method and code; a stranger's made-up method names, whatever they are,
// are all "unknown", so no caller can add a series to the registry's metrics.
func TestObserverLabelsStayBounded(t *testing.T) {
	s := NewServer(nil, slog.New(slog.DiscardHandler))
	s.Register("test.ok", Method{Public: true, Call: func(context.Context, *Caller, []byte) (any, error) { return struct{}{}, nil }})
	obs := &seen{}
	s.Observe(obs)
	srv := httptest.NewServer(s)
	defer srv.Close()
	call(t, srv, "test.ok", "application/json", "{}")
	call(t, srv, "test.ok", "text/plain", "{}")
	for i := range 3 {
		call(t, srv, fmt.Sprintf("made.up%d", i), "application/json", "{}")
	}
	want := []string{"test.ok OK", "test.ok INVALID_INPUT", "unknown NOT_FOUND", "unknown NOT_FOUND", "unknown NOT_FOUND"}
	if strings.Join(obs.calls, ", ") != strings.Join(want, ", ") {
		t.Errorf("observed %q, want %q", obs.calls, want)
	}
}
