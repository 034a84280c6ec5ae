package hostenv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// Runner runs one program and returns its standard output. A program that cannot start
// or exits with a non-zero status is an error, which should carry the end of its standard
// error. Every program a unit runs goes through it.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) (stdout []byte, err error)
}

// Secrets fetches a secret by its reference (secret://...) from the registry. Units fetch
// secrets only when they are about to use them, and never put them in a report.
type Secrets interface {
	Secret(ctx context.Context, ref string) ([]byte, error)
}

// Env is the host a unit converges.
type Env struct {
	// Root is the directory the host's / is at: "/" on a real host.
	Root string
	// Runner runs the host's programs.
	Runner Runner
	// Secrets fetches secrets; nil when no unit of the spec needs one.
	Secrets Secrets
}

// Pass is one unit's application: the host, and what the unit did to it.
type Pass struct {
	Env
	corrections []string
	reboot      []string
}

// NewPass starts applying one unit to the host env.
func NewPass(env Env) *Pass { return &Pass{Env: env} }

// Path returns where the host path name is under the root.
func (p *Pass) Path(name string) string { return filepath.Join(p.Root, name) }

// Corrected records a correction the unit made, like "set vm.swappiness 60 -> 10".
func (p *Pass) Corrected(format string, args ...any) {
	p.corrections = append(p.corrections, fmt.Sprintf(format, args...))
}

// RebootFor records why the host must reboot before the unit's state is in effect.
func (p *Pass) RebootFor(format string, args ...any) {
	p.reboot = append(p.reboot, fmt.Sprintf(format, args...))
}

// Corrections returns the corrections recorded, in the order they were made.
func (p *Pass) Corrections() []string { return p.corrections }

// RebootReasons returns why the host must reboot, empty when it need not.
func (p *Pass) RebootReasons() []string { return p.reboot }

// Run runs a program; a failure is DRIVER_ERROR, or TIMEOUT once the unit is out of
// time. A program that changes the host goes through Change, which records it.
func (p *Pass) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := p.Runner.Run(ctx, name, args...)
	if err != nil {
		return out, programError(ctx, name, args, err)
	}
	return out, nil
}

// Change runs a program that changes the host and records correction when it succeeds.
func (p *Pass) Change(ctx context.Context, correction string, name string, args ...string) ([]byte, error) {
	out, err := p.Run(ctx, name, args...)
	if err != nil {
		return out, err
	}
	p.Corrected("%s", correction)
	return out, nil
}

// programError is a failed program as DRIVER_ERROR, or TIMEOUT when the unit's time ran
// out. The command line is named without its arguments past the first two, which may
// carry secrets in a caller that forgot to redact them.
func programError(ctx context.Context, name string, args []string, err error) error {
	cmd := strings.Join(append([]string{name}, args[:min(len(args), 2)]...), " ")
	if ctx.Err() != nil {
		return proto.Errorf(proto.Timeout, "%s: the unit ran out of time: %w", cmd, errors.Join(ctx.Err(), err))
	}
	return proto.Errorf(proto.DriverError, "%s: %w", cmd, err)
}

// EnsureService has systemd run unit: enabled and started when it is not both, else
// restarted when restartFor gives a reason ("its new package"), each recorded as a
// correction; nothing is done to a unit enabled and active with no reason to restart.
func (p *Pass) EnsureService(ctx context.Context, unit, restartFor string) error {
	enabled, active, err := p.ServiceState(ctx, unit)
	switch {
	case err != nil:
		return err
	case enabled != "enabled" || active != "active":
		_, err = p.Change(ctx, "enabled and started "+unit+" (it was "+enabled+", "+active+")", "systemctl", "enable", "--now", unit)
	case restartFor != "":
		_, err = p.Change(ctx, "restarted "+unit+" for "+restartFor, "systemctl", "restart", unit)
	}
	return err
}

// ServiceState returns how systemd has a unit: its is-enabled state (enabled, disabled,
// not-found, ...) and its is-active state (active, inactive, failed, ...). systemctl
// answers a unit that is not enabled or not active with a non-zero status and the state
// on its output, which is what is returned.
func (p *Pass) ServiceState(ctx context.Context, unit string) (enabled, active string, err error) {
	state := func(verb string) (string, error) {
		out, err := p.Runner.Run(ctx, "systemctl", verb, unit)
		if s := strings.TrimSpace(string(out)); s != "" && ctx.Err() == nil {
			return s, nil
		}
		if err == nil {
			err = errors.New("no answer")
		}
		return "", programError(ctx, "systemctl", []string{verb, unit}, err)
	}
	if enabled, err = state("is-enabled"); err != nil {
		return "", "", err
	}
	active, err = state("is-active")
	return enabled, active, err
}
