package registry

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/registry/userdata"
	"github.com/better-compute/better-compute/registry/workflow"
)

// roleAgent is a machine's agent in a test: what its handlers were given, by kind, and
// its session once it runs.
type roleAgent struct {
	// log is where its session logs; nowhere when nil.
	log *slog.Logger
	s   *session.Agent
	// agent is the fleet's agent whose sessions it runs.
	agent *fleetAgent

	mu  sync.Mutex
	got map[string][]json.RawMessage
	// hold, when set (holdAnswers), holds each answer of the kind holdKind until it is
	// closed.
	hold     chan struct{}
	holdKind string
}

// holdAnswers holds the answers of the commands of kind the agent runs from now until
// the returned release is called.
func (a *roleAgent) holdAnswers(kind string) (release func()) {
	hold := make(chan struct{})
	a.mu.Lock()
	a.hold, a.holdKind = hold, kind
	a.mu.Unlock()
	return func() { close(hold) }
}

func (a *roleAgent) received(kind string) []json.RawMessage {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.got[kind]
}

// run runs an agent with creds (the busy fleet's, the real session code over QUIC)
// until the returned stop is called; its handlers record what they are given and answer
// as that agent.
func (a *roleAgent) run(f *busyFleet, node string, creds bcdconf.Agent) (stop func()) {
	record := func(kind string, answer func(ctx context.Context) (json.RawMessage, error)) session.Handler {
		return func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			a.mu.Lock()
			if a.got == nil {
				a.got = map[string][]json.RawMessage{}
			}
			a.got[kind] = append(a.got[kind], p)
			hold, held := a.hold, a.holdKind == kind
			a.mu.Unlock()
			if hold != nil && held {
				select {
				case <-hold:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return answer(ctx)
		}
	}
	wiped := proto.DiskWipeResult{Mode: proto.WipeQuick, Disks: []proto.WipedDisk{{Name: "vda", SizeBytes: 64 << 20, Method: proto.WipeMethodSignatures,
		Wiped: true, Bytes: 2 << 20, ReadBack: &proto.ReadBack{Expect: proto.ExpectZeroes, Passed: true}}}}
	agent := f.newAgent(node, creds)
	agent.log = a.log
	a.agent = agent
	agent.handlers = map[string]session.Handler{
		proto.CommandDiskWipe: record(proto.CommandDiskWipe, func(ctx context.Context) (json.RawMessage, error) {
			return session.SignResult(ctx, proto.CommandDiskWipe, wiped)
		}),
		proto.CommandDiagDCGM: record(proto.CommandDiagDCGM, func(ctx context.Context) (json.RawMessage, error) {
			return session.SignResult(ctx, proto.CommandDiagDCGM, proto.DCGMResult{Level: 1, Tests: []proto.DCGMTest{
				{Name: "software", Status: proto.DCGMPass, Results: []proto.DCGMEntityResult{{Entity: "GPU", Status: proto.DCGMPass}}}}})
		}),
		proto.CommandDeployImage: record(proto.CommandDeployImage, func(context.Context) (json.RawMessage, error) {
			return json.Marshal(proto.DeployImageResult{})
		}),
		"echo": record("echo", func(context.Context) (json.RawMessage, error) { return json.RawMessage(`"echo"`), nil }),
	}
	a.s = agent.start()
	return agent.session(context.Background(), a.s)
}

// roleMachine is a machine of a busy fleet with a user data document rendered for it
// and its installed OS's credentials.
type roleMachine struct {
	t         *testing.T
	f         *busyFleet
	node      string
	nodeCreds bcdconf.Agent
	rendered  proto.UserDataRendered
}

func newRoleMachine(t *testing.T, mac string) *roleMachine {
	m := &roleMachine{t: t, f: serveBusy(t, Config{UserData: userdata.Config{ControlPlaneURL: "https://registry.example:7443", BcdURL: "https://downloads.example/bcd", BcdSHA256: strings.Repeat("ab", 32)}})}
	storetest.Fill(t, m.f.r.st)
	m.node, m.nodeCreds = m.f.provisioned(mac)
	m.f.must(m.f.r.st.Update(func(tx *store.Tx) (err error) {
		m.rendered, err = m.f.r.plane.userData.Render(tx, profile.UserData{Kind: "cloud-init", Template: userdata.CloudInitTemplate}, userdata.Node{ID: m.node})
		return err
	}), "rendering user data")
	return m
}

// relay relays a command of kind with input to the machine's agent of role, as a
// workflow does.
func (m *roleMachine) relay(ctx context.Context, role, id, kind string, input any) (json.RawMessage, error) {
	in, err := json.Marshal(input)
	if err != nil {
		m.t.Fatal(err)
	}
	return m.f.r.plane.Relay(ctx, workflow.RelayTarget{NodeID: m.node, Role: role, Run: "wf_roles", Step: kind}, id, kind, workflow.CommandInput{Payload: in})
}

// TestRamdiskCommandsNeverReachTheNodeAgent: the installed OS's agent of a machine (or
// whoever holds a copy of its certificate) is connected as the machine while a workflow
// relays the machine's ramdisk its disk.wipe and its deploy.image (whose delivery
// carries the new OS's user data, join token included). It never gets either, not on
// its session nor on a new one; the ramdisk, when it connects beside it, gets both, the
// deploy.image with the user data, and the installed OS's session stays. Before the
// commands carried their role, the node agent answered the wipe and the deploy failed
// FORBIDDEN at its user data.
func TestRamdiskCommandsNeverReachTheNodeAgent(t *testing.T) {
	m := newRoleMachine(t, "52:54:00:00:08:01")
	f, node, nodeCreds, rendered := m.f, m.node, m.nodeCreds, m.rendered
	defer f.working(node)() // the workflow whose ramdisk it is runs
	ramdiskCreds, err := f.join(node, "ramdisk", f.mint(store.TokenRamdisk, node))
	if err != nil {
		t.Fatal(err)
	}

	ep := f.r.plane.ep
	installed := &roleAgent{}
	stopInstalled := installed.run(f, node, nodeCreds)
	defer func() { stopInstalled() }()
	f.wait("the installed OS's session", func() bool { return ep.Connected(node, proto.RoleNode) })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	relay := func(role, id, kind string, input any) (json.RawMessage, error) {
		return m.relay(ctx, role, id, kind, input)
	}
	type answer struct {
		out json.RawMessage
		err error
	}
	wipe, image := make(chan answer, 1), make(chan answer, 1)
	go func() {
		out, err := relay(profile.Ramdisk, "wf_roles:main.1:a1", proto.CommandDiskWipe, proto.DiskWipe{Mode: proto.WipeQuick})
		wipe <- answer{out, err}
	}()
	go func() {
		out, err := relay(profile.Ramdisk, "wf_roles:main.2:a1:image", proto.CommandDeployImage,
			proto.DeployImage{Ref: "ubuntu@1", UserDataRef: rendered.UserDataRef, UserDataKind: rendered.Kind})
		image <- answer{out, err}
	}()
	f.wait("both ramdisk commands stored (or answered)", func() bool {
		var n int
		f.r.st.View(func(tx *store.Tx) error { p, _ := tx.PendingAgentCommands(node); n = len(p); return nil })
		return n == 2 || len(wipe)+len(image) > 0
	})
	// The installed OS's agent answers a command of its own on this session, and again on
	// a new session, whose hello sends it what is pending for it.
	for round := range 2 {
		if _, err := relay(profile.Node, "wf_roles:main.3:a"+string(rune('1'+round)), "echo", "x"); err != nil {
			t.Fatalf("a command for the installed OS, round %d: %v", round, err)
		}
		if round == 0 {
			stopInstalled()
			stopInstalled = installed.run(f, node, nodeCreds)
		}
	}
	for name, ch := range map[string]chan answer{"disk.wipe": wipe, "deploy.image": image} {
		select {
		case a := <-ch:
			t.Errorf("%s answered with only the installed OS connected: %s, %v", name, a.out, a.err)
		default:
		}
	}
	if got := installed.received(proto.CommandDiskWipe); len(got) != 0 || t.Failed() {
		t.Fatalf("the installed OS's agent was sent disk.wipe %d times", len(got))
	}

	ramdisk := &roleAgent{}
	defer ramdisk.run(f, node, ramdiskCreds)()
	for name, ch := range map[string]chan answer{"disk.wipe": wipe, "deploy.image": image} {
		if a := <-ch; a.err != nil {
			t.Errorf("%s once the ramdisk connected: %v", name, a.err)
		}
	}
	if got := ramdisk.received(proto.CommandDiskWipe); len(got) != 1 {
		t.Errorf("the ramdisk ran disk.wipe %d times, want once", len(got))
	}
	var delivered proto.DeployImage
	if got := ramdisk.received(proto.CommandDeployImage); len(got) != 1 || json.Unmarshal(got[0], &delivered) != nil ||
		!strings.HasPrefix(string(delivered.UserData), "#cloud-config") {
		t.Errorf("the ramdisk's deploy.image: %q, want it once with the user data", got)
	}
	for _, kind := range []string{proto.CommandDiskWipe, proto.CommandDeployImage} {
		if got := installed.received(kind); len(got) != 0 {
			t.Errorf("the installed OS's agent was sent %s: %s", kind, got)
		}
	}
	if !ep.Connected(node, proto.RoleNode) || !ep.Connected(node, proto.RoleRamdisk) {
		t.Errorf("connected: node %v, ramdisk %v; want the two agents of the machine each with its session",
			ep.Connected(node, proto.RoleNode), ep.Connected(node, proto.RoleRamdisk))
	}
}

// TestRelayRefusesAKindItsRoleDoesNotRun: with the installed OS's agent of a machine
// connected (one whose session would answer a disk.wipe or a deploy.image: a tampered
// agent, or whoever holds a copy of its certificate), relaying it a disk.wipe, a
// deploy.image naming the machine's user data, or deploy.deploy (a step the registry
// runs itself) is refused FORBIDDEN (reason role) at once: nothing is stored, nothing
// is sent, and the agent still answers a command of its own. Before the relay checked
// the kind against the role, the node agent ran the wipe and got the user data.
func TestRelayRefusesAKindItsRoleDoesNotRun(t *testing.T) {
	m := newRoleMachine(t, "52:54:00:00:08:02")
	f, node, rendered := m.f, m.node, m.rendered
	ep := f.r.plane.ep
	installed := &roleAgent{}
	defer installed.run(f, node, m.nodeCreds)()
	f.wait("the installed OS's session", func() bool { return ep.Connected(node, proto.RoleNode) })

	relay := func(role, id, kind string, input any) (json.RawMessage, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return m.relay(ctx, role, id, kind, input)
	}
	refused := []struct {
		role, id, kind string
		input          any
	}{
		{profile.Node, "wf_roles:main.0:a1", proto.CommandDiskWipe, proto.DiskWipe{Mode: proto.WipeQuick}},
		{profile.Node, "wf_roles:main.1:a1:image", proto.CommandDeployImage,
			proto.DeployImage{Ref: "ubuntu@1", UserDataRef: rendered.UserDataRef, UserDataKind: rendered.Kind}},
		{profile.Ramdisk, "wf_roles:main.2:a1", proto.StepDeploy, proto.DeployImage{Ref: "ubuntu@1"}},
	}
	for _, c := range refused {
		out, err := relay(c.role, c.id, c.kind, c.input)
		if e, ok := errors.AsType[*proto.Error](err); !ok || e.Code != proto.Forbidden || e.Details.Reason != proto.ReasonRole {
			t.Errorf("%s relayed to the %s agent: %s, %v; want FORBIDDEN (reason %s)", c.kind, c.role, out, err, proto.ReasonRole)
		}
		f.must(f.r.st.View(func(tx *store.Tx) error {
			if _, err := tx.AgentCommand(node, c.id); proto.CodeOf(err) != proto.NotFound {
				t.Errorf("%s refused to the %s agent was stored (%v)", c.kind, c.role, err)
			}
			return nil
		}), "reading the commands")
	}
	// A command of the node agent's own goes through after them: had any of them been
	// sent, it would have been sent first on the same session.
	if _, err := relay(profile.Node, "wf_roles:main.3:a1", "echo", "x"); err != nil {
		t.Fatalf("a command for the installed OS: %v", err)
	}
	for _, kind := range []string{proto.CommandDiskWipe, proto.CommandDeployImage} {
		if got := installed.received(kind); len(got) != 0 {
			t.Errorf("the installed OS's agent was sent %s: %s", kind, got)
		}
	}
}
