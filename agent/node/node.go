// Package node is `bcd node`, the agent of an installed host: one agent session with the
// registry whose pushed NodeSpec host section goes to the host converger, which fetches
// the secrets its units name (a k8s-join's bootstrap token) over the same session. A generation is
// acknowledged once a pass applied it (no unit failed); each pass's unit results are
// reported as the `host` inventory section. The last applied NodeSpec is kept in the
// configuration directory, so a restarted agent converges it again at once and reports
// its generation in its hello. It answers the registry's inventory.refresh and
// diag.dcgm with the machine's code shared with the ramdisk (hardware/), reading sysfs
// and procfs under the host's root.
package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/agent/metrics"
	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/hardware/dcgm"
	"github.com/better-compute/better-compute/hardware/inventory"
	"github.com/better-compute/better-compute/hostconverge"
	"github.com/better-compute/better-compute/proto"
)

// StateFile is the last applied NodeSpec, in the configuration directory.
const StateFile = "nodespec.json"

// Options are what `bcd node` runs with.
type Options struct {
	// ConfigDir is the directory `bcd join` wrote.
	ConfigDir string
	// Root is where the host's / is: "/" on a host.
	Root string
	// Runner runs the host's programs; hostconverge.ExecRunner when nil.
	Runner hostconverge.Runner
	// Log receives the agent's structured logs.
	Log *slog.Logger
	// Clock is the agent's one clock: its session's (reconnects, keep-alive, renewal)
	// and its converger's period. clock.Real when nil.
	Clock clock.Clock
}

// Run runs the node agent until ctx ends.
func Run(ctx context.Context, o Options) error {
	creds, err := bcdconf.LoadAgent(o.ConfigDir)
	if proto.CodeOf(err) == proto.InvalidConfig {
		return err // each wrong key of config.toml, at its path
	}
	if err != nil {
		return proto.Errorf(proto.InvalidConfig, "%v", err)
	}
	if creds.Config.Role != string(proto.RoleNode) {
		return proto.Errorf(proto.InvalidConfig, "%s joined as a %s agent; bcd node runs the node role", o.ConfigDir, creds.Config.Role)
	}
	a := newAgent(o.ConfigDir, o.Log)
	last, err := a.load(creds.Config.NodeID)
	if err != nil {
		return err
	}
	hw := inventory.Reader{Root: o.Root, Log: o.Log}
	first, err := hw.Read(ctx)
	if err != nil { // the hardware sections wait for the registry's inventory.refresh
		o.Log.Warn("reading the hardware inventory", "err", err)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	a.session, err = session.New(session.Config{
		Addrs: creds.Config.Endpoints(), Certificate: creds.Certificate, ServerCAs: creds.ServingCAs, Clock: o.Clock,
		ObservedGeneration: last.Generation, Apply: a.apply, Log: o.Log, Inventory: inventory.Sections(first),
		BootID: session.ReadBootID(o.Root, o.Log), Handlers: a.handlers(hw, o),
	})
	if err != nil {
		return err
	}
	if last.Generation > 0 {
		a.specs <- convergeSpec(last)
	}
	runner := o.Runner
	if runner == nil {
		runner = hostconverge.ExecRunner{}
	}
	if addr := creds.Config.MetricsListen; addr != "" {
		a.metrics = metrics.NewNode(a.session.Connected)
		_, stop, err := metrics.Serve(addr, "metricsListen", a.metrics.Gatherer(), o.Log)
		if err != nil {
			return err
		}
		defer stop()
	}
	conv := &hostconverge.Converger{Root: o.Root, Runner: runner, Secrets: a.session, Clock: o.Clock, Log: o.Log}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { conv.Run(ctx, a.specs, a) })
	wg.Go(func() {
		a.session.KeepRenewed(ctx, func(previous, renewed tls.Certificate) error {
			return bcdconf.SaveRenewed(o.ConfigDir, previous, renewed)
		})
	})
	a.session.Run(ctx)
	cancel()
	wg.Wait()
	return nil
}

// handlers are the node agent's relayed commands by kind: the kinds the registry relays
// to the node role (proto.RelayRoles), reading the hardware with hw.
func (a *agent) handlers(hw inventory.Reader, o Options) map[string]session.Handler {
	return map[string]session.Handler{
		proto.CommandInventoryRefresh: func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
			return hw.Command(ctx, payload, a.session.SetInventory)
		},
		proto.CommandDiagDCGM: dcgm.Runner{Root: o.Root, Log: o.Log, Sign: session.SignResult}.Command,
	}
}

// agent joins the session and the converger.
type agent struct {
	session *session.Agent
	// metrics counts the converger's passes; nil when bcd node serves no metrics.
	metrics *metrics.Node
	state   string
	log     *slog.Logger
	specs   chan hostconverge.Spec

	mu sync.Mutex
	// pending is the spec being applied, saved once a pass applies it.
	pending proto.NodeSpec
	// firstPass waits, per generation, for the results of its first pass.
	firstPass map[int64]chan []hostconverge.UnitResult
	// acked is the generation acknowledged last: saved, and told to the session.
	acked int64
}

func newAgent(configDir string, log *slog.Logger) *agent {
	return &agent{state: filepath.Join(configDir, StateFile), log: log, firstPass: map[int64]chan []hostconverge.UnitResult{},
		specs: make(chan hostconverge.Spec, 1)}
}

// apply is the session's Apply: it hands the spec to the converger and waits for its
// first pass. A pass with a failed unit, or a spec that cannot be saved, is an error; the
// converger tries again on its period and Report acknowledges the generation then.
func (a *agent) apply(ctx context.Context, spec proto.NodeSpec) error {
	first := make(chan []hostconverge.UnitResult, 1)
	a.mu.Lock()
	a.pending = spec
	a.firstPass[spec.Generation] = first
	a.mu.Unlock()
	select { // the newest spec replaces one the converger has not taken
	case <-a.specs:
	default:
	}
	a.specs <- convergeSpec(spec)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case results := <-first:
		if !hostconverge.Applied(results) {
			return failedUnits(results)
		}
		if err := a.save(spec); err != nil {
			return err
		}
		a.mu.Lock()
		a.acked = spec.Generation // the session acknowledges it as apply returns
		a.mu.Unlock()
		return nil
	}
}

// Report is hostconverge.Reporter, and the one place that decides when a generation is
// acknowledged. Every pass's results become the `host` inventory section. The first pass
// of a generation answers apply, which the session acknowledges as it returns; a later
// pass that applies the generation being applied, not acknowledged yet (its first pass
// failed, or it could not be saved), saves and acknowledges it.
func (a *agent) Report(generation int64, results []hostconverge.UnitResult) {
	if a.metrics != nil {
		a.metrics.Pass(results)
	}
	inv := proto.HostInventory{Generation: generation, Units: []json.RawMessage{}}
	for _, r := range results {
		b, _ := proto.Marshal(r)
		inv.Units = append(inv.Units, b)
	}
	if b, err := proto.Marshal(inv); err == nil {
		a.session.SetInventory(proto.SectionHost, b)
	}
	a.mu.Lock()
	first := a.firstPass[generation]
	delete(a.firstPass, generation)
	spec := a.pending
	late := first == nil && spec.Generation == generation && a.acked != generation && hostconverge.Applied(results)
	a.mu.Unlock()
	if first != nil {
		first <- results
		return
	}
	if !late {
		return
	}
	if err := a.save(spec); err != nil {
		a.log.Error("saving the applied NodeSpec; the next pass tries again", "generation", generation, "err", err)
		return
	}
	a.mu.Lock()
	a.acked = generation
	a.mu.Unlock()
	a.session.Acknowledge(generation)
}

// load is the NodeSpec node's agent applied last, saved in the config directory: none
// when it saved none, or when the one saved is another node's (a `bcd join` as another
// node into the directory keeps the file, and its host units, its labels and its
// generation are not this node's to converge or to report). A saved spec the session
// would not have applied (it fails NodeSpec validation: a negative generation, a host
// unit of no name) is INVALID_CONFIG at its field, as a file that is not JSON is.
func (a *agent) load(node string) (proto.NodeSpec, error) {
	b, err := os.ReadFile(a.state)
	if errors.Is(err, os.ErrNotExist) {
		return proto.NodeSpec{}, nil
	}
	if err != nil {
		return proto.NodeSpec{}, err
	}
	var spec proto.NodeSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return proto.NodeSpec{}, proto.Errorf(proto.InvalidConfig, "%s: %v (remove it: the registry pushes the spec again)", a.state, err)
	}
	if spec.Node != node {
		a.log.Warn("the saved NodeSpec is another node's: not applied; the registry pushes this node's", "file", a.state, "saved", spec.Node, "node", node)
		return proto.NodeSpec{}, nil
	}
	if err := spec.Validate(); err != nil {
		e := proto.AsError(err)
		return proto.NodeSpec{}, proto.Errorf(proto.InvalidConfig, "%s: %s (remove it: the registry pushes the spec again)", a.state, e.Message).WithPath(e.Details.Path)
	}
	return spec, nil
}

func (a *agent) save(spec proto.NodeSpec) error {
	b, err := proto.Marshal(spec)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(a.state, b, 0o600)
}

// convergeSpec is what the converger takes of a NodeSpec.
func convergeSpec(spec proto.NodeSpec) hostconverge.Spec {
	out := hostconverge.Spec{Generation: spec.Generation, Labels: spec.Labels}
	for _, u := range spec.Host {
		out.Units = append(out.Units, hostconverge.Unit{Name: u.Unit, When: u.When, Settings: u.Settings})
	}
	return out
}

// failedUnits is the error of a pass with failed units.
func failedUnits(results []hostconverge.UnitResult) error {
	var msgs []string
	code := proto.DriverError
	for _, r := range results {
		if r.Status == hostconverge.Failed {
			msgs = append(msgs, fmt.Sprintf("%s: %s", r.Unit, r.Message))
			if r.Terminal {
				code = r.Code
			}
		}
	}
	return proto.Errorf(code, "host units failed: %s", strings.Join(msgs, "; "))
}
