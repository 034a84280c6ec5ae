package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/site"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// restart closes the fleet's registry and starts another on its data directory,
// listening where it listened, as a registry process killed and started again does: its
// agents and clients come back to it, and it resumes the runs under way.
func (f *busyFleet) restart() {
	f.t.Helper()
	info := f.r.Info()
	f.must(f.r.Close(), "closing the registry")
	<-f.served
	f.r = newTestRegistry(f.t, Config{DataDir: f.dir, Listen: strings.TrimPrefix(info.URL, "https://"), AgentListen: info.AgentEndpoint,
		MetricsListen: "127.0.0.1:0"})
	f.served = serve(f.t, f.r)
}

// heldCommand holds the runs of an agent's handler until released, and records the
// payloads they were given.
type heldCommand struct {
	started, release chan struct{}
	once, freed      sync.Once
	mu               sync.Mutex
	payloads         []json.RawMessage
}

func newHeldCommand() *heldCommand {
	return &heldCommand{started: make(chan struct{}), release: make(chan struct{})}
}

// wrap is next, held until release is closed.
func (h *heldCommand) wrap(next session.Handler) session.Handler {
	return func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
		h.mu.Lock()
		h.payloads = append(h.payloads, p)
		h.mu.Unlock()
		h.once.Do(func() { close(h.started) })
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return next(ctx, p)
	}
}

// free lets the held runs go on; once is enough, and more do nothing.
func (h *heldCommand) free() {
	h.freed.Do(func() { close(h.release) })
}

// heldSiteAgent starts rack-a's site agent, whose boot.prepareRamdisk is held by the
// heldCommand it returns, with the context and wait group of the test's agents, which
// the test's end stops and waits for.
func (f *busyFleet) heldSiteAgent(t *testing.T) (context.Context, *sync.WaitGroup, *heldCommand) {
	ctx, cancel := context.WithCancel(context.Background())
	agents, held := &sync.WaitGroup{}, newHeldCommand()
	t.Cleanup(func() { held.free(); cancel(); agents.Wait() })
	siteAgent := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	siteAgent.handlers = map[string]session.Handler{proto.CommandPrepareRamdisk: held.wrap(
		func(context.Context, json.RawMessage) (json.RawMessage, error) {
			return json.Marshal(proto.PrepareRamdiskResult{Kind: proto.BootRamdisk})
		})}
	agents.Go(func() { siteAgent.run(ctx, siteAgent.start()) })
	return ctx, agents, held
}

// deployPrepareHeld starts a fleet whose site agent holds the commands it is sent, and
// deploys acme's profile prepare (one boot.prepareRamdisk step) on its first node until
// the site agent runs the step's command.
func deployPrepareHeld(t *testing.T, prepare string) (*busyFleet, *heldCommand, api.Node, api.DeployStarted) {
	t.Helper()
	f := startBusyFleet(t)
	ctx, _, held := f.heldSiteAgent(t)
	c := f.tenants["acme"]
	f.must(c.Call(ctx, "profiles.create", api.CreateProfileRequest{Document: api.Document(prepare)}, nil), "profiles.create")
	node, ok := f.enrollReady(c, 0, 0)
	if !ok {
		t.FailNow()
	}
	started, err := call[api.DeployStarted](c, "metal.deploy", api.DeployRequest{NodeID: node.ID, ProfileID: "prep"})
	if !f.must(err, "metal.deploy") || !f.wait("boot.prepareRamdisk to run at the site agent", func() bool { return len(held.ran()) > 0 }) {
		t.FailNow()
	}
	return f, held, node, started
}

// restartAndEnd restarts the registry, then lets held's runs go on, and returns the
// run workflow once it ended (or as last read when it did not).
func (f *busyFleet) restartAndEnd(c *api.Client, held *heldCommand, workflow string) api.WorkflowView {
	f.restart()
	held.free()
	return f.ended(c, workflow)
}

// ended is run workflow once it ended, as c reads it (or as last read when it did not).
func (f *busyFleet) ended(c *api.Client, workflow string) api.WorkflowView {
	var wf api.WorkflowView
	f.wait("the run to end", func() bool {
		var err error
		wf, err = call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: workflow})
		return err == nil && (wf.State == store.RunSucceeded || wf.State == store.RunFailed)
	})
	return wf
}

// ran is the payloads of the handler's runs.
func (h *heldCommand) ran() []json.RawMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.payloads
}

// TestResumedStepsSendWhatTheySentBefore stops the registry while a step's command,
// whose input the step makes anew each time it runs, is pending at its agent, starts it
// again on the same data and addresses, and only then lets the agent answer: a
// boot.prepareRamdisk (a ramdisk join token), a tpm.activate (a credential sealed
// around a secret) and a tpm.quote (a nonce). The resumed step relays what it relayed
// before, the agent runs it once, and the step succeeds in its one attempt, reading the
// answer by what it sent: no second token is minted, the activation is checked against
// its own secret, the quote is verified over its own nonce. Before, the resumed step
// made its input anew, and the relay refused it as CONFLICT: a pending command is never
// given another payload.
func TestResumedStepsSendWhatTheySentBefore(t *testing.T) {
	const (
		prepare = `{"id": "prep", "version": 1, "target": "metal", "steps": [{"use": "boot.prepareRamdisk"}]}`
		attest  = `{"id": "attest", "version": 1, "target": "metal", "steps": [{"use": "attest.boot"}]}`
	)
	for _, tc := range []struct {
		name, kind, profile, id, sub string
	}{
		{"boot.prepareRamdisk's join token", proto.CommandPrepareRamdisk, prepare, "prep", ""},
		{"tpm.activate's credential", proto.CommandTPMActivate, attest, "attest", ":tpm-activate"},
		{"tpm.quote's nonce", proto.CommandTPMQuote, attest, "attest", ":tpm-quote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startBusyFleet(t)
			ctx, agents, held := f.heldSiteAgent(t)
			c := f.tenants["acme"]
			if tc.profile == attest {
				f.must(c.Call(ctx, "pools.update", api.UpdatePoolRequest{Name: "gpu", Policy: &api.PoolPolicy{HardwareProfile: "gpu-redfish",
					MeasuredBoot: &api.MeasuredBootPolicy{Mode: proto.MeasuredBootTOFU}}}, nil), "pools.update")
			}
			f.must(c.Call(ctx, "profiles.create", api.CreateProfileRequest{Document: api.Document(tc.profile)}, nil), "profiles.create")
			node, ok := f.enrollReady(c, 0, 0)
			if !ok {
				t.FailNow()
			}
			var m *tpmMachine
			if tc.profile == attest {
				m = &tpmMachine{t: t, node: node.ID, tenant: "acme", kernel: "kernel of " + node.ID, enrolled: make(chan struct{}),
					held: map[string]*heldCommand{tc.kind: held}}
				m.boot(t)
			}
			started, err := call[api.DeployStarted](c, "metal.deploy", api.DeployRequest{NodeID: node.ID, ProfileID: tc.id})
			if !f.must(err, "metal.deploy") {
				t.FailNow()
			}
			if m != nil {
				m.bootRamdisk(ctx, f, agents)
			}
			if !f.wait(tc.kind+" to run at its agent", func() bool { return len(held.ran()) > 0 }) {
				t.FailNow()
			}

			wf := f.restartAndEnd(c, held, started.WorkflowID)
			if wf.State != store.RunSucceeded || len(wf.Steps[0].Attempts) != 1 {
				t.Fatalf("the run resumed with %s pending: %s, %d attempts, failure %+v", tc.kind, wf.State, len(wf.Steps[0].Attempts), wf.Failure)
			}
			if ran := held.ran(); len(ran) != 1 {
				t.Errorf("%s ran %d times at its agent, want once", tc.kind, len(ran))
			}
			// What the store holds of the command, relayed again by the resumed step, is
			// what the agent ran: once the run recorded the answer, its digest.
			target := workflow.RelayTarget{NodeID: node.ID, Role: profile.Ramdisk, Run: started.WorkflowID, Step: "attest.boot"}
			if tc.kind == proto.CommandPrepareRamdisk {
				target = workflow.RelayTarget{NodeID: node.ID, SiteID: "rack-a", Role: profile.Site, Run: started.WorkflowID, Step: tc.kind}
			}
			id := wf.Steps[0].Attempts[0].CommandID + tc.sub
			f.checkRecorded(held, target, id, tc.kind, started.WorkflowID)
			switch tc.kind {
			case proto.CommandPrepareRamdisk:
				minted := 0
				f.r.st.View(func(tx *store.Tx) error {
					toks, _, err := tx.JoinTokens(store.Page{})
					for _, tok := range toks {
						if tok.Workflow == started.WorkflowID {
							minted++
						}
					}
					return err
				})
				if minted != 1 {
					t.Errorf("the run minted %d ramdisk tokens, want one", minted)
				}
			default:
				f.checkBoot(m, proto.VerdictBaseline)
			}
		})
	}
}

// TestResumedSiteCommandKeepsItsBindings stops the registry while a site command (a
// boot.prepareRamdisk) is pending at the site agent, changes the node's driver bindings
// meanwhile, starts the registry again and only then lets the agent answer. The resumed
// step relays the command as stored, with the bindings it was made with: the agent runs
// it once and the step succeeds in its one attempt; a command made now carries the new
// bindings. Before, the resumed step wrapped the command anew with the node's current
// bindings, and the relay refused it as CONFLICT, which cost the step an attempt.
func TestResumedSiteCommandKeepsItsBindings(t *testing.T) {
	f, held, node, started := deployPrepareHeld(t, `{"id": "prep", "version": 1, "target": "metal", "steps": [{"use": "boot.prepareRamdisk"}]}`)
	c := f.tenants["acme"]
	const changed = "console"
	f.must(f.r.st.Update(func(tx *store.Tx) error {
		_, err := tx.UpdateNode(node.ID, func(n *store.Node) error {
			if n.Drivers == nil {
				n.Drivers = map[string]store.DriverBinding{}
			}
			n.Drivers[changed] = store.DriverBinding{Driver: "sol"}
			return nil
		})
		return err
	}), "changing the node's driver bindings")

	wf := f.restartAndEnd(c, held, started.WorkflowID)
	if wf.State != store.RunSucceeded || len(wf.Steps[0].Attempts) != 1 {
		t.Fatalf("the run resumed with its site command pending and the node's bindings changed: %s, %d attempts, failure %+v",
			wf.State, len(wf.Steps[0].Attempts), wf.Failure)
	}
	ran := held.ran()
	if len(ran) != 1 {
		t.Fatalf("boot.prepareRamdisk ran %d times at the site agent, want once", len(ran))
	}
	var ranCmd proto.SiteCommand
	f.must(json.Unmarshal(ran[0], &ranCmd), "decoding what the site agent ran")
	if _, ok := ranCmd.Drivers[changed]; ok {
		t.Errorf("the site agent ran the command with the bindings changed after it was made: %s", ran[0])
	}
	var now json.RawMessage
	f.must(f.r.st.View(func(tx *store.Tx) (err error) {
		now, _, err = site.Command(tx, node.ID, started.WorkflowID, proto.CommandPrepareRamdisk, proto.CommandPrepareRamdisk, ranCmd.Input)
		return err
	}), "making the command now")
	var nowCmd proto.SiteCommand
	f.must(json.Unmarshal(now, &nowCmd), "decoding a command made now")
	if _, ok := nowCmd.Drivers[changed]; !ok {
		t.Errorf("a command made now does not carry the node's changed bindings: %s", now)
	}
	f.checkRecorded(held, workflow.RelayTarget{NodeID: node.ID, SiteID: "rack-a", Role: profile.Site, Run: started.WorkflowID, Step: proto.CommandPrepareRamdisk},
		wf.Steps[0].Attempts[0].CommandID, proto.CommandPrepareRamdisk, started.WorkflowID)
}

// checkRecorded checks command id of kind for target, which its agent ran once (held)
// and run recorded: the store keeps the digest of what the agent ran, not the payload
// or the answer, and the id is spent. Relayed again as the run's step would relay it
// (workflow.Relay, Stored then Relay), it is INVALID_STATE naming the run, and sends and
// runs nothing: the agent ran it once, and nothing is pending for it.
func (f *busyFleet) checkRecorded(held *heldCommand, target workflow.RelayTarget, id, kind, run string) {
	f.t.Helper()
	agent := relayAgent(target)
	var cmd store.AgentCommand
	f.must(f.r.st.View(func(tx *store.Tx) (err error) { cmd, err = tx.AgentCommand(agent, id); return err }), "reading the command")
	ran := held.ran()
	if len(ran) != 1 {
		f.t.Fatalf("%s ran %d times at its agent, want once", kind, len(ran))
	}
	if sum := sha256.Sum256(ran[0]); cmd.Recorded == nil || !bytes.Equal(cmd.Recorded.PayloadSHA256, sum[:]) || len(cmd.Payload)+len(cmd.Result) > 0 {
		f.t.Fatalf("the stored %s once its run recorded it: recorded %+v, %d bytes of payload and %d of answer; want only the digest of what the agent ran",
			kind, cmd.Recorded, len(cmd.Payload), len(cmd.Result))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _, storedErr := f.r.plane.Stored(ctx, target, id)
	_, relayErr := f.r.plane.Relay(ctx, target, id, kind, workflow.CommandInput{Payload: json.RawMessage(`{}`)})
	for name, err := range map[string]error{"read as stored": storedErr, "relayed again": relayErr} {
		if proto.CodeOf(err) != proto.InvalidState || !strings.Contains(err.Error(), run) {
			f.t.Errorf("the recorded %s %s: %v; want INVALID_STATE naming workflow %s", kind, name, err, run)
		}
	}
	f.must(f.r.st.View(func(tx *store.Tx) error {
		pending, err := tx.PendingAgentCommands(agent)
		for _, c := range pending {
			f.t.Errorf("%s pending for %s after the recorded %s was relayed again", c.ID, agent, kind)
		}
		return err
	}), "reading what is pending")
	if ran := held.ran(); len(ran) != 1 {
		f.t.Errorf("%s ran %d times at its agent once relayed again, want once", kind, len(ran))
	}
}
