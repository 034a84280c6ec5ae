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
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// serve opens a store for t and an API server over it with every method registered.
func serve(t testing.TB) (*store.Store, *Server) {
	t.Helper()
	st := storetest.Open(t, store.Options{})
	s := NewServer(st, slog.New(slog.DiscardHandler))
	s.RegisterAll()
	return st, s
}

// rootClient serves every method over a new store with the root tenant, and returns a
// client calling them with a root credential allowed actions.
func rootClient(t *testing.T, actions ...string) *Client {
	t.Helper()
	st, s := serve(t)
	var secret string
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if _, err = tx.CreateTenant(store.RootTenant); err != nil {
			return err
		}
		_, secret, err = tx.CreateCredential(store.RootTenant, actions, time.Now().Add(time.Hour))
		return err
	})
	return NewHandlerClient(s, secret)
}

// call posts body to method on srv and returns the status, the Retry-After header and the
// error answered.
func call(t *testing.T, srv *httptest.Server, method, contentType, body string) (int, string, proto.Error) {
	t.Helper()
	return callAs(t, srv, "", method, contentType, body)
}

// callAs is call with secret as the bearer credential, none when "".
func callAs(t *testing.T, srv *httptest.Server, secret, method, contentType, body string) (int, string, proto.Error) {
	t.Helper()
	var e proto.Error
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/"+method, strings.NewReader(body))
	if err != nil {
		t.Error(err) // not Fatal: callers call from goroutines of their own
		return 0, "", e
	}
	req.Header.Set("Content-Type", contentType)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Error(err)
		return 0, "", e
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		if err := json.Unmarshal(data, &e); err != nil {
			t.Errorf("answer %s: %v", data, err)
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

// TestListsPageAlike: every list reached through listPage answers an empty page as []
// (never null), refuses a limit beyond the largest page as INVALID_INPUT at limit, and
// the root-only lists answer another tenant's credential FORBIDDEN.
func TestListsPageAlike(t *testing.T) {
	st, s := serve(t)
	actions := []string{ActionTenantsManage, ActionSitesManage, ActionTokensManage}
	var root, acme string
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		for _, tenant := range []string{store.RootTenant, "acme"} {
			if _, err = tx.CreateTenant(tenant); err != nil {
				return err
			}
		}
		if _, root, err = tx.CreateCredential(store.RootTenant, actions, time.Now().Add(time.Hour)); err != nil {
			return err
		}
		_, acme, err = tx.CreateCredential("acme", actions, time.Now().Add(time.Hour))
		return err
	})
	lists := map[string]struct {
		h        http.Handler
		key      string
		rootOnly bool
	}{
		"sites.list":   {s, "sites", true},
		"tokens.list":  {s, "tokens", true},
		"signers.list": {s.HostHandler(), "signers", false},
	}
	for method, l := range lists {
		t.Run(method, func(t *testing.T) {
			c := NewHandlerClient(l.h, root)
			var got map[string]any
			if err := c.Call(context.Background(), method, struct{}{}, &got); err != nil {
				t.Fatal(err)
			}
			if items, ok := got[l.key].([]any); !ok || len(items) != 0 {
				t.Errorf("an empty page: %s is %#v, want []", l.key, got[l.key])
			}
			err := c.Call(context.Background(), method, map[string]int{"limit": store.MaxPage + 1}, &got)
			if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "limit" {
				t.Errorf("a limit beyond the largest page: %v, want INVALID_INPUT at limit", err)
			}
			if l.rootOnly {
				if err := NewHandlerClient(l.h, acme).Call(context.Background(), method, struct{}{}, &got); proto.CodeOf(err) != proto.Forbidden {
					t.Errorf("another tenant's credential: %v, want FORBIDDEN", err)
				}
			}
		})
	}
	var tenants TenantList
	if err := NewHandlerClient(s, root).Call(context.Background(), "tenants.list", struct{}{}, &tenants); err != nil || len(tenants.Tenants) == 0 {
		t.Errorf("tenants.list: %+v, %v", tenants, err)
	}
	if err := NewHandlerClient(s, root).Call(context.Background(), "tenants.list", map[string]int{"limit": store.MaxPage + 1}, &tenants); proto.CodeOf(err) != proto.InvalidInput {
		t.Errorf("tenants.list beyond the largest page: %v, want INVALID_INPUT", err)
	}
	if err := NewHandlerClient(s, acme).Call(context.Background(), "tenants.list", struct{}{}, &tenants); proto.CodeOf(err) != proto.Forbidden {
		t.Errorf("tenants.list by another tenant: %v, want FORBIDDEN", err)
	}
}

// TestAnUnknownSiteIsNotFoundAtSiteID: every sites call that names a site answers one
// that does not exist NOT_FOUND at siteId.
func TestAnUnknownSiteIsNotFoundAtSiteID(t *testing.T) {
	c := rootClient(t, ActionSitesManage)
	for method, body := range map[string]any{
		"sites.update":    map[string]any{"siteId": "rack-9", "imageSources": []string{}},
		"sites.locations": SiteLocationsRequest{SiteID: "rack-9"},
		"sites.inventory": SiteRequest{SiteID: "rack-9"},
		"sites.cachePlan": SiteRequest{SiteID: "rack-9"},
		"sites.knownMacs": KnownMACsRequest{SiteID: "rack-9"},
	} {
		var out map[string]any
		err := c.Call(context.Background(), method, body, &out)
		if e := proto.AsError(err); e.Code != proto.NotFound || e.Details.Path != "siteId" {
			t.Errorf("%s of an unknown site: %v, want NOT_FOUND at siteId", method, err)
		}
	}
}
