package metal

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

const digest = "6f1ed002ab5595859014ebf0951522d9e3a8e3d0cf4f9f4e8b19f7b9b6a5f2c1"

// harness is a registry's metal service and workflow engine over a real store, with
// fakes at the edges: the machine and its agents, the image catalog, the user-data
// renderer and the agents' applied generations.
type harness struct {
	t        *testing.T
	open     func(store.Options) (*store.Store, error)
	shutdown func()
	clock    *clock.Fake
	store    *store.Store
	joins    *workflow.JoinLog
	svc      *Service
	engine   *workflow.Engine
	machine  *machine
	images   *fakeImages
	userData *fakeUserData
	revoked  *revocations
	presence *presence
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	dir := t.TempDir()
	return newHarnessOn(t, func(opts store.Options) (*store.Store, error) { return store.Open(dir, opts) })
}

// newHarnessOn is newHarness over the store open opens, each time the registry boots.
func newHarnessOn(t *testing.T, open func(store.Options) (*store.Store, error)) *harness {
	t.Helper()
	h := &harness{t: t, open: open, clock: clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	h.machine = &machine{answers: map[string]func(json.RawMessage) (json.RawMessage, error){}}
	h.images = &fakeImages{images: map[string]Image{"ubuntu-24.04-server@2026.09": {
		ID: "img_1", Tenant: "acme", Ref: "ubuntu-24.04-server@2026.09", Kind: "os", Format: "qcow2", Compression: "none",
		SHA256: digest, SizeBytes: 3 << 30, Source: "https://images.example/ubuntu.raw.zst"}}}
	h.userData = &fakeUserData{}
	h.revoked = &revocations{}
	h.presence = &presence{}
	h.boot()
	t.Cleanup(func() {
		h.shutdown()
		if m := h.machine; len(m.misrouted) > 0 {
			t.Errorf("metal relayed commands to agents that do not run their kinds (proto.RelayRoles): %q", m.misrouted)
		}
	})
	st := h.store
	err := st.Update(func(tx *store.Tx) error {
		if _, err := tx.CreateTenant("acme"); err != nil {
			return err
		}
		if _, err := tx.CreateSite("rack-a"); err != nil {
			return err
		}
		if _, err := tx.SetSiteBMCNetworks("rack-a", []string{"10.0.0.0/24"}); err != nil {
			return err
		}
		// The catalog's images come from images.example, which the site lets its
		// machines fetch from.
		if _, err := tx.SetSiteImageSources("rack-a", []string{"images.example"}); err != nil {
			return err
		}
		policy := store.PoolPolicy{HardwareProfile: "gpu-redfish", Hugepages: json.RawMessage(`{"pages1g":64}`), GPUSharing: json.RawMessage(`{"mode":"mps","replicas":4}`)}
		if err := h.svc.CheckPoolPolicy(policy); err != nil {
			return err
		}
		_, err := tx.CreatePool(store.Pool{Tenant: "acme", Name: "gpu", Site: "rack-a", Policy: policy})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// boot opens the store and starts the engine and the metal service over it, resuming
// every running workflow: a registry starting.
func (h *harness) boot() {
	st, err := h.open(store.Options{Now: h.clock.Now})
	if err != nil {
		h.t.Fatal(err)
	}
	h.store, h.joins = st, workflow.NewJoinLog(st, store.Holder{})
	h.machine.mu.Lock()
	h.machine.joins = h.joins
	h.machine.mu.Unlock()
	engine := workflow.New(workflow.Config{Store: st, Clock: h.clock, Relay: h.machine, Joins: h.joins})
	h.engine = engine
	h.svc = New(Config{Store: st, Engine: engine, Joins: h.joins, HardwareProfiles: maps.Clone(hardware),
		Images: h.images, UserData: h.userData, Generations: fakeGenerations{}, Ramdisk: fakeRamdisk{},
		Presence: h.presence})
	st.OnNodeIdentity(h.revoked.told)
	ctx, cancel := context.WithCancel(context.Background())
	if err := engine.Resume(ctx); err != nil {
		h.t.Fatal(err)
	}
	h.shutdown = func() { cancel(); engine.Wait(); st.Close() }
}

// restart stops the registry (the engine drops its runs where they are, the store
// closes) and boots it again.
func (h *harness) restart() {
	h.shutdown()
	h.boot()
}

// enroll enrolls a machine in pool gpu, waits for its enrollment (and what the pool
// chains to it) to end, forgets the commands it sent, and returns the node's id.
func (h *harness) enroll(labels map[string]string) string {
	h.t.Helper()
	n, run := h.startEnroll("52:54:00:00:00:01", labels)
	for id := run.ID; ; id = n.Workflow {
		if _, n = h.end(id); n.Workflow == id {
			break
		}
	}
	h.machine.forget()
	return n.ID
}

// startEnroll enrolls a machine of mac in pool gpu and starts its enrollment.
func (h *harness) startEnroll(mac string, labels map[string]string) (store.Node, store.Run) {
	h.t.Helper()
	var n store.Node
	var run store.Run
	err := h.store.Update(func(tx *store.Tx) (err error) {
		n, run, err = h.svc.Enroll(tx, Enrollment{Tenant: "acme", Pool: "gpu", MACs: []string{mac}, Labels: labels,
			BMC: store.BMC{Driver: "redfish", Address: "https://10.0.0.5", CredentialRef: "secret://bmc/n1"}})
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.svc.Start(run)
	return n, run
}

// setPolicy replaces pool gpu's policy.
func (h *harness) setPolicy(policy store.PoolPolicy) {
	h.t.Helper()
	err := h.store.Update(func(tx *store.Tx) error { _, err := tx.SetPoolPolicy("acme", "gpu", policy); return err })
	if err != nil {
		h.t.Fatal(err)
	}
}

// act makes a request of a node and starts (or aborts) its workflow.
func (h *harness) act(node string, req Request, o Options) (store.Run, store.Node, error) {
	h.t.Helper()
	var run store.Run
	var n store.Node
	err := h.store.Update(func(tx *store.Tx) (err error) {
		run, n, err = h.svc.Act(tx, "acme", node, req, o)
		return err
	})
	if err == nil && run.ID != "" {
		h.svc.Start(run)
	}
	return run, n, err
}

// remediate runs a remediation profile on a node and starts its workflow.
func (h *harness) remediate(node, profileID, reason string) (store.Run, store.Node, error) {
	h.t.Helper()
	var run store.Run
	var n store.Node
	err := h.store.Update(func(tx *store.Tx) (err error) {
		run, n, err = h.svc.Remediate(tx, "acme", node, profileID, 0, reason)
		return err
	})
	if err == nil {
		h.svc.Start(run)
	}
	return run, n, err
}

// node reads a node.
func (h *harness) node(id string) store.Node {
	h.t.Helper()
	var n store.Node
	if err := h.store.View(func(tx *store.Tx) (err error) { n, err = tx.Node(id); return err }); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// deploy stores a profile file in acme (unless stored already) and deploys it on the
// node.
func (h *harness) deploy(node, file string) (store.Run, error) {
	h.t.Helper()
	doc, err := os.ReadFile(file)
	if err != nil {
		h.t.Fatal(err)
	}
	p, err := profile.Define(doc)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.deployRecord(node, func(tx *store.Tx) (store.ProfileRecord, error) {
		rec, ok, err := tx.Profile("acme", p.ID(), p.Version())
		if err != nil || ok {
			return rec, err
		}
		return tx.CreateProfile(store.ProfileRecord{Tenant: "acme", ID: p.ID(), Version: p.Version(), Document: p.Document()})
	})
}

// deployShipped deploys a shipped profile on the node.
func (h *harness) deployShipped(node, id string) (store.Run, error) {
	h.t.Helper()
	for _, p := range profile.Shipped() {
		if fmt.Sprintf("%s@%d", p.ID(), p.Version()) == id {
			rec := store.ProfileRecord{Tenant: profile.ShippedTenant, ID: p.ID(), Version: p.Version(), Document: p.Document()}
			return h.deployRecord(node, func(*store.Tx) (store.ProfileRecord, error) { return rec, nil })
		}
	}
	h.t.Fatalf("no shipped profile %s", id)
	return store.Run{}, nil
}

func (h *harness) deployRecord(node string, record func(*store.Tx) (store.ProfileRecord, error)) (store.Run, error) {
	var run store.Run
	err := h.store.Update(func(tx *store.Tx) error {
		rec, err := record(tx)
		if err != nil {
			return err
		}
		run, err = h.svc.Deploy(tx, "acme", node, rec)
		return err
	})
	if err == nil {
		h.svc.Start(run)
	}
	return run, err
}

// end waits for a run to end and returns it with its node.
func (h *harness) end(id string) (store.Run, store.Node) {
	h.t.Helper()
	// A bound on a hang, not on speed: a deploy at its bound (1 MiB records) on etcd
	// under the race detector, beside other work, took more than 10 s.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := h.engine.Watch(ctx, id, 0)
	for err == nil && run.State == store.RunRunning && ctx.Err() == nil {
		run, err = h.engine.Watch(ctx, id, run.Rev)
	}
	if err != nil || run.State == store.RunRunning {
		h.t.Fatalf("workflow %s did not end: %v %+v", id, err, run.Steps)
	}
	var n store.Node
	if err := h.store.View(func(tx *store.Tx) (err error) { n, err = tx.Node(run.Node); return err }); err != nil {
		h.t.Fatal(err)
	}
	return run, n
}

// relayed is one command the machine's agents received.
type relayed struct {
	ID, Kind, Role, Input string
	// Target is where the engine addressed it.
	Target workflow.RelayTarget
}

// machine stands for a machine, its BMC and its agents: it answers each command once
// (an id sent again gets the kept answer), boots into the ramdisk when power-cycled and
// into the installed OS when kexec'd or restarted, joining as the agent it boots.
type machine struct {
	joins *workflow.JoinLog
	mu    sync.Mutex
	got   []relayed
	// stored is what each command was first relayed with (Stored); kept its answer.
	stored map[string]workflow.CommandInput
	kept   map[string]json.RawMessage
	// spent are the answered commands whose answers their run recorded (Recorded),
	// with where: a relay of one, or a read of what it was stored with, is
	// INVALID_STATE, as the registry's relay has it.
	spent   map[string]string
	answers map[string]func(json.RawMessage) (json.RawMessage, error)
	// bootsNothing: a power cycle boots no agent.
	bootsNothing bool
	// boots counts the machine's boots: each joins with a boot id of its own (bootID).
	boots int
	// fromDisk: the machine boots its disk for good (metal-unrescue), so a power cycle
	// boots the installed OS.
	fromDisk bool
	// hangs are the kinds of commands the machine never answers: their relay returns
	// only when its context ends.
	hangs map[string]bool
	// crashAt is the count of the command at which the registry crashes: before the
	// machine has it, or once it has answered it (crashAfter); 0 for none. crashed is
	// closed then.
	crashAt    int
	crashAfter bool
	crashed    chan struct{}
	sent       int
	// misrouted are the commands relayed to a role whose agent does not run their kind
	// (proto.RelayRoles), or of a kind no step names or relays: the real relay refuses
	// them, and every harness fails its test on any.
	misrouted []string
}

// hang makes the machine never answer commands of kind.
func (m *machine) hang(kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hangs == nil {
		m.hangs = map[string]bool{}
	}
	m.hangs[kind] = true
}

func (m *machine) Relay(ctx context.Context, target workflow.RelayTarget, id, kind string, in workflow.CommandInput) (json.RawMessage, error) {
	input := in.Payload
	m.mu.Lock()
	if where, ok := m.spent[id]; ok {
		m.mu.Unlock()
		return nil, proto.Errorf(proto.InvalidState, "command %s was recorded in %s: a step relayed it again", id, where)
	}
	// The relay stores a command before it is sent, and a pending one asked for with
	// another input is CONFLICT, as the registry's relay does.
	if prev, ok := m.stored[id]; !ok {
		if m.stored == nil {
			m.stored = map[string]workflow.CommandInput{}
		}
		m.stored[id] = in
	} else if _, answered := m.kept[id]; !answered && (!bytes.Equal(prev.Payload, in.Payload) || !bytes.Equal(prev.Kept, in.Kept)) {
		m.mu.Unlock()
		return nil, proto.Errorf(proto.Conflict, "command %s is pending with another input", id)
	}
	if roles, known := proto.RelayRoles(kind); !known || !slices.Contains(roles, proto.Role(target.Role)) {
		m.misrouted = append(m.misrouted, target.Role+" "+kind)
	}
	if m.hangs[kind] {
		m.got = append(m.got, relayed{ID: id, Kind: kind, Role: target.Role, Input: string(input)})
		m.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if out, ok := m.kept[id]; ok {
		m.mu.Unlock()
		return out, nil
	}
	m.sent++
	crash := m.sent == m.crashAt
	if crash && !m.crashAfter {
		m.mu.Unlock()
		return m.crash(ctx)
	}
	out, err := m.answer(target, id, kind, input)
	m.mu.Unlock()
	if crash {
		return m.crash(ctx)
	}
	return out, err
}

func (m *machine) Stored(_ context.Context, _ workflow.RelayTarget, id string) (workflow.CommandInput, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if where, ok := m.spent[id]; ok {
		return workflow.CommandInput{}, false, proto.Errorf(proto.InvalidState, "command %s was recorded in %s: a step read it again", id, where)
	}
	in, ok := m.stored[id]
	return in, ok, nil
}

// Recorded spends the answered commands of attempt, as the registry's relay does.
func (m *machine) Recorded(_ *store.Tx, _ store.Node, attempt, run, step string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.kept {
		if id == attempt || strings.HasPrefix(id, attempt+":") {
			if m.spent == nil {
				m.spent = map[string]string{}
			}
			m.spent[id] = run + " " + step
		}
	}
	return nil
}

// Agents are the node's own agent and its site's, whose id is the site's (site.Agent),
// as the registry's relay has them.
func (m *machine) Agents(node store.Node) []string {
	if node.Site == "" {
		return []string{node.ID}
	}
	return []string{node.ID, node.Site}
}

// crash tells that the registry crashes now, and holds the relay until it has stopped.
func (m *machine) crash(ctx context.Context) (json.RawMessage, error) {
	close(m.crashed)
	<-ctx.Done()
	return nil, ctx.Err()
}

// answer runs a command on the machine, with m.mu held.
func (m *machine) answer(target workflow.RelayTarget, id, kind string, input json.RawMessage) (json.RawMessage, error) {
	m.got = append(m.got, relayed{ID: id, Kind: kind, Role: target.Role, Input: string(input), Target: target})
	var out json.RawMessage = json.RawMessage(`{}`)
	var err error
	switch {
	case m.answers[kind] != nil:
		out, err = m.answers[kind](input)
	case kind == proto.CommandDeployImage:
		var in proto.DeployImage
		json.Unmarshal(input, &in)
		out, _ = json.Marshal(proto.DeployImageResult{SHA256: in.SHA256, BytesWritten: in.SizeBytes})
	case kind == proto.CommandDiskWipe:
		// What registry/attest stores for a wipe it attested.
		out = json.RawMessage(`{"attested":true}`)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case kind == "management.setBootDevice":
		m.fromDisk = strings.Contains(string(input), `"persistent":true`) && strings.Contains(string(input), `"disk"`)
	case kind == "power.setPower" && string(input) == `{"action":"cycle"}` && m.fromDisk:
		err = m.joins.Joined(target.NodeID, "node", m.boot())
	case kind == "power.setPower" && string(input) == `{"action":"cycle"}` && !m.bootsNothing:
		err = m.joins.Joined(target.NodeID, "ramdisk", m.boot())
	case kind == "boot.kexec" || kind == "power.setPower" && (string(input) == `{"action":"graceful-restart"}` || string(input) == `{"action":"on"}`):
		err = m.joins.Joined(target.NodeID, "node", m.boot())
	}
	if m.kept == nil {
		m.kept = map[string]json.RawMessage{}
	}
	m.kept[id] = out
	return out, err
}

// boot counts a boot of the machine and returns its boot id, with m.mu held.
func (m *machine) boot() string {
	m.boots++
	return bootID(m.boots)
}

// bootID is the boot id of the machine's n-th boot.
func bootID(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012x", n) }

// forget forgets the commands received so far.
func (m *machine) forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = nil
}

// kinds returns the kinds of the commands received, as "role kind".
func (m *machine) kinds() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, r := range m.got {
		out = append(out, r.Role+" "+r.Kind)
	}
	return out
}

func (m *machine) received(kind string) []relayed {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []relayed
	for _, r := range m.got {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

type fakeImages struct {
	images    map[string]Image
	verifyErr error
	// verified lists the refs VerifyForUse was asked about, with allowUnsigned.
	verified []string
	// uncached are the refs the site's cache does not hold.
	uncached map[string]bool
}

func (f *fakeImages) Resolve(_ context.Context, tenant, ref string) (Image, error) {
	img, ok := f.images[ref]
	if !ok || img.Tenant != tenant {
		return Image{}, proto.Errorf(proto.NotFound, "image %s not found", ref)
	}
	return img, nil
}

func (f *fakeImages) VerifyForUse(_ context.Context, tenant string, img Image, allowUnsigned bool) error {
	f.verified = append(f.verified, fmt.Sprintf("%s for %s allowUnsigned=%v", img.Ref, tenant, allowUnsigned))
	return f.verifyErr
}

func (f *fakeImages) CacheURL(_ context.Context, site string, img Image, _ time.Time) (string, error) {
	if f.uncached[img.Ref] {
		return "", nil
	}
	return "http://" + site + ".cache/sha256/" + img.SHA256, nil
}

type fakeUserData struct{ calls int }

func (f *fakeUserData) Render(_ *store.Tx, node store.Node, _ string, p *profile.Profile) (proto.UserDataRendered, error) {
	f.calls++
	ud, _ := p.UserData()
	return proto.UserDataRendered{UserDataRef: fmt.Sprintf("secret://userdata/%s/%d", node.ID, f.calls), Kind: ud.Kind, JoinTokenID: "tok1"}, nil
}

// fakeGenerations says every agent has applied its NodeSpec.
type fakeGenerations struct{}

func (fakeGenerations) WaitObserved(context.Context, string) error { return nil }

// revocations records the nodes whose identity revocation the store told its
// OnNodeIdentity hooks of, whose agents' sessions the registry ends.
type revocations struct {
	mu    sync.Mutex
	nodes []string
}

func (r *revocations) told(n store.NodeChange) {
	if n.IdentityRevokedAt.IsZero() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.nodes, n.ID) { // told again as the retire that revoked it ends
		r.nodes = append(r.nodes, n.ID)
	}
}

func (r *revocations) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.nodes)
}

// fakeRamdisk mints the same ramdisk boot every time.
type fakeRamdisk struct{}

func (fakeRamdisk) Prepare(_ *store.Tx, node store.Node, _ string) (proto.PrepareRamdisk, error) {
	return proto.PrepareRamdisk{MACs: node.MACs, Token: "bcj_test", Registry: "https://registry.test", Args: []string{"bc.node=" + node.ID}}, nil
}

// Joinable finds every token joinable: the harness's token is no store's.
func (fakeRamdisk) Joinable(context.Context, string) error { return nil }

// presence says which nodes' installed OS agents have a session.
type presence struct {
	mu        sync.Mutex
	connected map[string]bool
}

func (p *presence) set(node string, connected bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.connected == nil {
		p.connected = map[string]bool{}
	}
	p.connected[node] = connected
}

func (p *presence) NodeAgentConnected(_ *store.Tx, node string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.connected[node]
}
