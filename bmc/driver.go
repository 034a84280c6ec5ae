package bmc

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// Driver is one machine's BMC, opened for a while: every concern, then Close. A driver
// that lacks a concern answers UNSUPPORTED for it.
type Driver interface {
	Power
	Management
	VirtualMedia
	Inspection
	// Close ends the BMC session, if the driver keeps one.
	Close() error
}

// Config is a driver binding's configuration: where the BMC is, the reference of the
// credential to log in with, and the driver's own options. It holds no secret.
type Config struct {
	Address       string            `json:"address"`
	CredentialRef CredentialRef     `json:"credentialRef,omitempty"`
	Options       map[string]string `json:"options,omitempty"`
}

// Env is what the site lends a driver it opens.
type Env struct {
	// Credentials resolves Config.CredentialRef.
	Credentials Credentials
	// Log receives the driver's structured log; nil discards it.
	Log *slog.Logger
}

// Logger returns env's logger, or one that discards.
func (e Env) Logger() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}

// Opener opens a driver for the BMC cfg describes. Bad configuration is INVALID_CONFIG;
// a BMC that cannot be reached or refuses the login is DRIVER_ERROR.
type Opener func(ctx context.Context, cfg Config, env Env) (Driver, error)

// Registry maps a driver's name, as bindings and hardware profiles spell it, to its
// opener.
type Registry map[string]Opener

// Open opens the driver called name.
func (r Registry) Open(ctx context.Context, name string, cfg Config, env Env) (Driver, error) {
	open, ok := r[name]
	if !ok {
		return nil, proto.Errorf(proto.InvalidConfig, "BMC driver %q is unknown; the drivers are %s", name, strings.Join(slices.Sorted(maps.Keys(r)), ", ")).WithPath("driver")
	}
	return open(ctx, cfg, env)
}
