package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/api"
)

// newTestRegistry is New in dir (made 0700), on the loopback addresses cfg names or on
// loopback ports of its own, closed when the test ends.
func newTestRegistry(t *testing.T, cfg Config) *Registry {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.AgentListen == "" {
		cfg.AgentListen = "127.0.0.1:0"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// serve runs r.Serve until the test ends; the returned channel has its result.
func serve(t *testing.T, r *Registry) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.Serve(context.Background()) }()
	t.Cleanup(func() { r.Close() })
	return done
}

// wellKnown fetches the registry's well-known document, trusting its serving CA.
func wellKnown(r *Registry) (joinwire.Anchors, error) {
	cfg, err := api.LoadClientConfig(r.Info().AdminConfig)
	if err != nil {
		return joinwire.Anchors{}, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(cfg.ServingCA))
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get(r.Info().URL + joinwire.WellKnownPath)
	if err != nil {
		return joinwire.Anchors{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return joinwire.Anchors{}, err
	}
	return joinwire.ParseWellKnown(body)
}

// TestNewServeClose: a registry New made serves once Serve runs, Close ends Serve (nil)
// and releases the store and the admin socket, so a second registry opens the same data
// directory with the same keys; a registry closed without serving releases them too.
func TestNewServeClose(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first := newTestRegistry(t, Config{DataDir: dir})
	if !first.Info().FirstStart {
		t.Errorf("the first start is not FirstStart")
	}
	done := serve(t, first)
	doc, err := wellKnown(first)
	if err != nil {
		t.Fatal(err)
	}
	if doc.AgentEndpoint != first.Info().AgentEndpoint {
		t.Errorf("well-known agent endpoint %q, want %q", doc.AgentEndpoint, first.Info().AgentEndpoint)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
	if _, err := os.Stat(filepath.Join(dir, api.AdminSocket)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the admin socket is left: %v", err)
	}
	if err := first.Serve(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Serve on a closed registry: %v", err)
	}

	unserved := newTestRegistry(t, Config{DataDir: dir})
	if unserved.Info().FirstStart || unserved.Info().Pins != first.Info().Pins {
		t.Errorf("the second start: first %v, pins %+v, want %+v", unserved.Info().FirstStart, unserved.Info().Pins, first.Info().Pins)
	}
	if err := unserved.Close(); err != nil {
		t.Fatal(err)
	}
	third := newTestRegistry(t, Config{DataDir: dir})
	serve(t, third)
	if _, err := wellKnown(third); err != nil {
		t.Errorf("the third start: %v", err)
	}
}

// TestAgentEndpointsAdvertised: the well-known document lists the agent endpoints the
// registry is given (every replica's), its own first endpoint as agentEndpoint; a list
// with an entry that is not host:port is refused, naming the flag, before anything
// starts.
func TestAgentEndpointsAdvertised(t *testing.T) {
	endpoints := []string{"127.0.0.1:7444", "127.0.0.2:7444", "[::1]:7444"}
	r := newTestRegistry(t, Config{AgentEndpoints: endpoints})
	serve(t, r)
	doc, err := wellKnown(r)
	if err != nil {
		t.Fatal(err)
	}
	if doc.AgentEndpoint != endpoints[0] || !slices.Equal(doc.AgentEndpoints, endpoints) {
		t.Errorf("well-known endpoints %q %q, want %q", doc.AgentEndpoint, doc.AgentEndpoints, endpoints)
	}

	dir := filepath.Join(t.TempDir(), "data")
	_, err = New(Config{DataDir: dir, Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", AgentEndpoints: []string{"127.0.0.1:7444", "registry-2"}})
	if pe, ok := err.(*proto.Error); !ok || pe.Code != proto.InvalidInput || pe.Details.Path != "--agent-endpoints" || !strings.Contains(pe.Message, "[1]") {
		t.Errorf("New with a bad endpoint: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused start made its data directory: %v", err)
	}
}

// TestCloseEndsUnfinishedRequests: connections to the API and to the admin socket on
// which a request has begun to arrive, and one whose client has sent none yet (a slow
// client, or a stranger that never finishes) are closed when the registry closes, and
// their goroutines end. Shutdown waits five seconds for such a connection, then gives up
// without closing it: the silent one was left open, its goroutine reading, after Close
// had returned. They are now closed as Shutdown begins (this test took 5 s before, 0.04 s
// after).
func TestCloseEndsUnfinishedRequests(t *testing.T) {
	dir := t.TempDir()
	r := newTestRegistry(t, Config{DataDir: dir})
	done := serve(t, r)
	cfg, err := api.LoadClientConfig(r.Info().AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(cfg.ServingCA))
	apiConn, err := tls.Dial("tcp", strings.TrimPrefix(r.Info().URL, "https://"), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer apiConn.Close()
	hostConn, err := net.Dial("unix", filepath.Join(dir, api.AdminSocket))
	if err != nil {
		t.Fatal(err)
	}
	defer hostConn.Close()
	silentConn, err := tls.Dial("tcp", strings.TrimPrefix(r.Info().URL, "https://"), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer silentConn.Close()
	for _, conn := range []net.Conn{apiConn, hostConn} {
		if _, err := io.WriteString(conn, "POST /v1/profiles.list HTTP/1.1\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve after Close: %v", err)
	}
	for _, g := range registryGoroutines() {
		t.Errorf("a goroutine of the registry left after Close:\n%s", g)
	}
	for name, conn := range map[string]net.Conn{"the API's": apiConn, "the admin socket's": hostConn, "a silent": silentConn} {
		conn.SetDeadline(time.Now().Add(time.Minute)) // a connection left open fails the test then
		if _, err := conn.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
			t.Errorf("%s connection after Close: %v, want it closed", name, err)
		}
	}
}
