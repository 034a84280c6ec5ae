package hostconverge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/labelexpr"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// Runner runs the host's programs; see hostenv.Runner. ExecRunner is the real one.
type Runner = hostenv.Runner

// Secrets fetches secrets from the registry; see hostenv.Secrets.
type Secrets = hostenv.Secrets

// ExecRunner runs programs on this host; see hostenv.ExecRunner.
type ExecRunner = hostenv.ExecRunner

// Unit is one unit of a NodeSpec's host section.
type Unit struct {
	// Name is the unit's name, like "sysctl".
	Name string `json:"unit"`
	// When is a label expression beside the settings' own when; the unit applies only
	// where both hold. Empty holds always.
	When string `json:"when,omitempty"`
	// Settings is the unit's settings document; empty is {}.
	Settings json.RawMessage `json:"settings,omitempty"`
}

// Spec is what one pass converges: a NodeSpec's generation, labels and host section.
type Spec struct {
	Generation int64
	Labels     map[string]string
	Units      []Unit
}

// Converger applies host-config units to one host.
type Converger struct {
	// Root is the directory the host's / is at: "/" on a real host.
	Root string
	// Runner runs every program the units run.
	Runner Runner
	// Secrets fetches the secrets units refer to (k8s-join's token).
	Secrets Secrets
	// Log receives one record per unit and pass; nil discards them.
	Log *slog.Logger
	// UnitTimeout bounds each unit's application; zero gives each unit its own default
	// (from one minute for sysctl to thirty for nvidia-driver).
	UnitTimeout time.Duration
	// Period is how often Run converges again to set drift back; zero is DefaultPeriod.
	Period time.Duration
	// Clock times Run's period; nil is the system clock (clock.Real).
	Clock Clock
}

// Converge makes one pass over spec and returns a result per unit of the spec: the known
// units in hostunit.Order(), then the others in spec order, each a terminal failure, as
// is a unit named twice. Before any unit, it removes the files holding a secret that an
// earlier pass left (removePrivateFiles).
func (c *Converger) Converge(ctx context.Context, spec Spec) []UnitResult {
	c.removePrivateFiles()
	byName := map[string]Unit{}
	var unique []Unit
	var twice []UnitResult
	for _, u := range spec.Units {
		if _, dup := byName[u.Name]; dup {
			twice = append(twice, c.log(failure(u.Name, proto.Errorf(proto.InvalidConfig, "unit %s is in the host section twice; the registry merges a pool's unit into the profile's", u.Name))))
			continue
		}
		byName[u.Name] = u
		unique = append(unique, u)
	}
	results := make([]UnitResult, 0, len(spec.Units))
	for _, name := range hostunit.Order() {
		if u, ok := byName[name]; ok && implementations[name].apply != nil {
			results = append(results, c.apply(ctx, u, spec.Labels))
		}
	}
	for _, u := range unique {
		if implementations[u.Name].apply == nil {
			results = append(results, c.log(failure(u.Name, proto.Errorf(proto.Unsupported, "bcd has no converger for unit %s; it applies %s", u.Name, strings.Join(hostunit.Order(), ", ")))))
		}
	}
	return append(results, twice...)
}

// removePrivateFiles removes what is in hostenv.PrivateDir: the file holding a secret
// (k8s-join's JoinConfiguration, with the cluster's bootstrap token) that a bcd killed
// while its program ran left, which would stay readable by root until the next boot.
// What it removed, or could not, is logged; the pass goes on either way.
func (c *Converger) removePrivateFiles() {
	removed, err := hostenv.RemovePrivateFiles(c.Root)
	if c.Log == nil {
		return
	}
	if len(removed) > 0 {
		c.Log.Warn("removed files holding a secret that an earlier pass left", "files", removed)
	}
	if err != nil {
		c.Log.Error("removing the files holding a secret that an earlier pass left", "err", err)
	}
}

// apply applies one known unit.
func (c *Converger) apply(ctx context.Context, u Unit, labels map[string]string) UnitResult {
	when, err := labelexpr.Parse(u.When)
	if u.When == "" {
		when, err = labelexpr.Expr{}, nil
	}
	if err != nil {
		return c.log(failure(u.Name, proto.Errorf(proto.InvalidConfig, "when: %v", err).WithPath("when")))
	}
	raw := []byte(u.Settings)
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	settings, err := hostunit.Decode(u.Name, raw)
	if err != nil {
		return c.log(failure(u.Name, err))
	}
	if !when.Eval(labels) || !settings.Condition().Eval(labels) {
		expr := strings.Trim(when.String()+" && "+settings.Condition().String(), " &")
		return c.log(UnitResult{Unit: u.Name, Status: Skipped, Message: "when " + expr + " does not hold for the node's labels"})
	}
	impl := implementations[u.Name]
	timeout := c.UnitTimeout
	if timeout <= 0 {
		timeout = impl.timeout
	}
	uctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p := hostenv.NewPass(hostenv.Env{Root: c.Root, Runner: c.Runner, Secrets: c.Secrets})
	err = run(uctx, p, impl, settings)
	if err != nil && uctx.Err() != nil && proto.CodeOf(err) != proto.Timeout {
		err = proto.Errorf(proto.Timeout, "the unit ran out of its %v: %w", timeout, err)
	}
	return c.log(result(u.Name, p, err))
}

// run applies the unit, turning a panic into an INTERNAL failure of this unit alone.
func run(ctx context.Context, p *hostenv.Pass, impl implementation, s hostunit.Settings) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = proto.Errorf(proto.Internal, "the unit's converger failed: %v", r)
		}
	}()
	return impl.apply(ctx, p, s)
}

// result is the UnitResult of a finished application.
func result(unit string, p *hostenv.Pass, err error) UnitResult {
	r := UnitResult{Unit: unit, Corrections: p.Corrections()}
	reboot := strings.Join(p.RebootReasons(), "; ")
	switch {
	case err != nil:
		f := failure(unit, err)
		r.Status, r.Code, r.Terminal, r.Message = f.Status, f.Code, f.Terminal, f.Message
		if reboot != "" {
			r.Message += "; a reboot is due as well: " + reboot
		}
	case reboot != "":
		r.Status, r.Message = RebootRequired, "reboot required: "+reboot
	case len(r.Corrections) > 0:
		r.Status, r.Message = Changed, fmt.Sprintf("made %d correction(s)", len(r.Corrections))
	default:
		r.Status, r.Message = Converged, "nothing to change"
	}
	return r
}

// failure is the failed result of err.
func failure(unit string, err error) UnitResult {
	e := proto.AsError(err)
	msg := strings.ReplaceAll(e.Message, "\n", "; ")
	if e.Details.Path != "" {
		msg += " (at " + e.Details.Path + ")"
	}
	return UnitResult{Unit: unit, Status: Failed, Message: msg, Code: e.Code, Terminal: terminal(e.Code)}
}

// log records r and returns it.
func (c *Converger) log(r UnitResult) UnitResult {
	if c.Log == nil {
		return r
	}
	level := slog.LevelInfo
	switch r.Status {
	case Converged, Skipped:
		level = slog.LevelDebug
	case Failed:
		level = slog.LevelWarn
	}
	c.Log.Log(context.Background(), level, "host unit", "unit", r.Unit, "status", r.Status, "message", r.Message, "corrections", r.Corrections)
	return r
}
