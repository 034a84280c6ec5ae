// Package metricshttp is the /metrics listener every process of the project serves its
// Prometheus metrics on: the registry's (`serve --metrics-listen`) and bcd site's and bcd
// node's (`metricsListen`). It serves a handler it is given, over HTTP without a
// credential, at GET /metrics and nowhere else, with the bounds of docs/operations.md;
// each side's metrics room makes the handler. A shared leaf: it imports nothing of the
// project but proto.
package metricshttp

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Serve answers GET /metrics on addr with h (HTTP, no credential: nothing in it is
// secret) until stop is called, and returns the address it listens on. It fails with
// INVALID_CONFIG at path, the flag or config field addr came from, when addr cannot be
// listened on.
func Serve(addr, path string, h http.Handler, log *slog.Logger) (_ net.Addr, stop func(), _ error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, proto.Errorf(proto.InvalidConfig, "listen on %s: %v (pick another %s address)", addr, err, path).WithPath(path)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: time.Minute,
		IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Error("metrics listener", "err", err)
		}
	}()
	log.Info("metrics listening", "url", "http://"+ln.Addr().String()+"/metrics")
	return ln.Addr(), func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}, nil
}
