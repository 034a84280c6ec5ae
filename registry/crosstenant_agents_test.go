package registry

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/quic-go/quic-go"
)

// craftedAgent is a client of the agent plane of its own making, as the root user of a
// machine (or whoever took a site host) runs with the agent's real key and certificate:
// the real QUIC and TLS the agents use, writing frames the real agent never writes.
type craftedAgent struct {
	t       *testing.T
	conn    *quic.Conn
	session *quic.Stream
}

// dialCrafted opens a session of its own with creds' certificate (no hello said yet).
func dialCrafted(t *testing.T, creds bcdconf.Agent) *craftedAgent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	conf := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{creds.Certificate}, RootCAs: creds.ServingCAs,
		NextProtos: []string{proto.AgentALPN}}
	conn, err := quic.DialAddr(ctx, creds.Config.AgentEndpoint, conf, &quic.Config{MaxIdleTimeout: time.Minute, KeepAlivePeriod: time.Second})
	if err != nil {
		t.Fatalf("dialing the agent endpoint: %v", err)
	}
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatalf("opening the session stream: %v", err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return &craftedAgent{t: t, conn: conn, session: s}
}

// write writes one frame of the JSON text body on w, as the agents frame a message.
func (c *craftedAgent) write(w *quic.Stream, body string) {
	c.t.Helper()
	if err := c.send(w, body); err != nil {
		c.t.Fatalf("writing %s: %v", body, err)
	}
}

// send writes one frame of the JSON text body on w and returns the stream's error.
func (c *craftedAgent) send(w *quic.Stream, body string) error {
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	_, err := w.Write(append(frame, body...))
	return err
}

// read reads the next frame of r, its payload as sent; an error once the stream or the
// connection ended.
func (c *craftedAgent) read(r *quic.Stream) ([]byte, error) {
	r.SetReadDeadline(time.Now().Add(20 * time.Second))
	return proto.ReadFrame(r)
}

// readMessage reads the next message of r, failing the test without one.
func (c *craftedAgent) readMessage(r *quic.Stream) (proto.Message, []byte) {
	c.t.Helper()
	b, err := c.read(r)
	if err != nil {
		c.t.Fatalf("reading the registry's next message: %v", err)
	}
	m, err := proto.DecodeMessage(b)
	if err != nil {
		c.t.Fatalf("the registry's message %s: %v", b, err)
	}
	return m, b
}

// drained reads the session stream until the registry ends the session, and returns
// every frame it sent meanwhile.
func (c *craftedAgent) drained() [][]byte {
	var frames [][]byte
	for {
		b, err := c.read(c.session)
		if err != nil {
			return frames
		}
		frames = append(frames, b)
	}
}

// command accepts the next command stream the registry opens and reads its command.
func (c *craftedAgent) command() (*quic.Stream, proto.Command) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 20*time.Second)
	defer cancel()
	s, err := c.conn.AcceptStream(ctx)
	if err != nil {
		c.t.Fatalf("waiting for a command: %v", err)
	}
	m, _ := c.readMessage(s)
	if m.Type != proto.MsgCommand {
		c.t.Fatalf("a command stream carries a %s", m.Type)
	}
	return s, *m.Command
}

// relayed relays cmd to node's agent in role until the test ends, in the background.
func (f *busyFleet) relayed(t *testing.T, node string, role proto.Role, id string) {
	go f.r.plane.ep.Relay(t.Context(), node, role, proto.Command{ID: id, Kind: "echo", Payload: json.RawMessage(`"` + id + `"`)})
	f.wait("command "+id+" stored", func() bool { _, err := f.agentCommand(node, id); return err == nil })
}

// agentCommand is the command id stored for node's agent.
func (f *busyFleet) agentCommand(node, id string) (c store.AgentCommand, err error) {
	err = f.r.st.View(func(tx *store.Tx) (err error) { c, err = tx.AgentCommand(node, id); return err })
	return c, err
}

// notAnswered fails t when the command id of node's agent was answered.
func (f *busyFleet) notAnswered(t *testing.T, node, id string) {
	t.Helper()
	c, err := f.agentCommand(node, id)
	if err != nil || c.Done {
		t.Errorf("command %s of %s: done %v, result %s, error %v (%v): another agent answered it", id, node, c.Done, c.Result, c.Error, err)
	}
}

// TestAnotherTenantsNodeAgentReachesNothingOfTheTenants: globex's root user holds its
// installed machine's `bcd node` key and certificate, joined for real, and speaks to the
// registry's agent endpoint with a client of its own over real QUIC. acme's machine, at
// the same site, has a NodeSpec naming acme's secret, a deploy run waiting for it, a
// command pending for its agent and no inventory. globex's client says hello naming
// acme's node, asks for acme's NodeSpec, asks for acme's secret (which its own NodeSpec
// does not name), sends inventory and an acknowledgement naming acme's node, answers
// its own commands with the ids of acme's command and of its own other command, and
// reports progress of acme's run's step. It gets its own NodeSpec and its own secret
// only; a refusal of acme's secret reads as that of a secret nobody has; no frame it is
// sent names acme's node or secret; and nothing of acme's changes.
func TestAnotherTenantsNodeAgentReachesNothingOfTheTenants(t *testing.T) {
	f := startBusyFleet(t)
	ctx := t.Context()
	site := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	defer site.session(ctx, site.start())() // it answers the enrollments' BMC reads
	acme, globex := f.tenants["acme"], f.tenants["globex"]
	a, ok := f.enrollReady(acme, 0, 1)
	b, ok2 := f.enrollReady(globex, 1, 1)
	if !ok || !ok2 {
		t.FailNow()
	}
	const aRef, bRef, nobodysRef = "secret://k8s/acme-join", "secret://k8s/globex-join", "secret://k8s/nobody-has"
	f.secretNamed(store.Node{ID: a.ID, Tenant: "acme"}, aRef)
	f.secretNamed(store.Node{ID: b.ID, Tenant: "globex"}, bRef)
	bCreds, err := f.join(b.ID, "node", f.mint(store.TokenProvisioned, b.ID))
	if err != nil {
		t.Fatalf("globex's installed OS joins: %v", err)
	}

	// acme's run waits for its machine's installed OS, and a command waits for its agent.
	f.must(acme.Call(ctx, "profiles.create", api.CreateProfileRequest{Document: api.Document(busyDeploy)}, nil), "profiles.create")
	started, err := call[api.DeployStarted](acme, "metal.deploy", api.DeployRequest{NodeID: a.ID, ProfileID: "joins"})
	if !f.must(err, "metal.deploy") {
		t.FailNow()
	}
	run := func() api.WorkflowView {
		wf, err := call[api.WorkflowView](acme, "workflows.get", api.GetWorkflowRequest{ID: started.WorkflowID})
		f.must(err, "workflows.get")
		return wf
	}
	f.wait("acme's run waiting for its machine", func() bool { wf := run(); return wf.Steps[0].State == store.StepRunning })
	step := run().Steps[0]
	aStep := fmt.Sprintf("%s:%s.%d:a1", started.WorkflowID, step.Phase, step.Index)
	f.relayed(t, a.ID, proto.RoleNode, "acme-cmd")
	type acmeState struct {
		spec      proto.NodeSpec
		status    store.AgentStatus
		inventory []store.InventorySection
	}
	acmeNow := func() (s acmeState) {
		f.must(f.r.st.View(func(tx *store.Tx) (err error) {
			if s.spec, err = tx.NodeSpec(a.ID); err != nil {
				return err
			}
			s.status, _ = tx.AgentStatus(a.ID)
			s.inventory, err = tx.Inventory(a.ID)
			return err
		}), "reading acme's node")
		return s
	}
	before := acmeNow()
	// names reports what of acme's a frame sent to globex's client names.
	names := func(frame []byte) []string {
		var named []string
		for _, s := range []string{a.ID, aRef, "acme", started.WorkflowID} {
			if bytes.Contains(frame, []byte(s)) {
				named = append(named, s)
			}
		}
		return named
	}

	t.Run("hello naming acme's node", func(t *testing.T) {
		c := dialCrafted(t, bCreds)
		c.write(c.session, fmt.Sprintf(`{"type":"hello","node":%[1]q,"nodeId":%[1]q,"hello":{"observedGeneration":0,"node":%[1]q,"nodeId":%[1]q}}`, a.ID))
		m, frame := c.readMessage(c.session)
		if m.Type != proto.MsgSpec || m.Spec.Node != b.ID || len(names(frame)) > 0 {
			t.Errorf("globex's hello naming acme's node was answered %s", frame)
		}
	})

	t.Run("a spec asked for acme's node", func(t *testing.T) {
		c := dialCrafted(t, bCreds)
		c.write(c.session, `{"type":"hello","hello":{"observedGeneration":0}}`)
		c.readMessage(c.session) // its own NodeSpec
		c.write(c.session, fmt.Sprintf(`{"type":"spec","spec":{"node":%q,"role":"node","generation":%d}}`, a.ID, before.spec.Generation))
		for _, frame := range c.drained() {
			if n := names(frame); len(n) > 0 {
				t.Errorf("asked for acme's NodeSpec, globex's client was sent %s, naming %v", frame, n)
			}
		}
		f.wait("the session that asked for another node's NodeSpec ended", func() bool { return !f.r.plane.ep.Connected(b.ID, proto.RoleNode) })
	})

	t.Run("secrets", func(t *testing.T) {
		c := dialCrafted(t, bCreds)
		c.write(c.session, `{"type":"hello","hello":{"observedGeneration":0}}`)
		c.readMessage(c.session)
		ask := func(id, ref string) proto.Secret {
			c.write(c.session, fmt.Sprintf(`{"type":"secretRequest","node":%q,"secretRequest":{"id":%q,"ref":%q,"node":%q,"tenant":"acme"}}`, a.ID, id, ref, a.ID))
			m, frame := c.readMessage(c.session)
			if m.Type != proto.MsgSecret || m.Secret.ID != id {
				t.Fatalf("asked for %s, the registry answered %s", ref, frame)
			}
			if n := names(bytes.ReplaceAll(frame, []byte(ref), nil)); len(n) > 0 { // the ref it sent is echoed
				t.Errorf("asked for %s, globex's client was sent %s, naming %v", ref, frame, n)
			}
			return *m.Secret
		}
		acmes, nobodys := ask("s1", aRef), ask("s2", nobodysRef)
		if len(acmes.Value) > 0 || acmes.Error == nil || acmes.Error.Code != proto.Forbidden {
			t.Errorf("globex's agent asked for acme's secret %s: value %q, error %v; want FORBIDDEN", aRef, acmes.Value, acmes.Error)
		}
		if acmes.Error != nil && nobodys.Error != nil &&
			(acmes.Error.Code != nobodys.Error.Code || strings.ReplaceAll(acmes.Error.Message, aRef, "REF") != strings.ReplaceAll(nobodys.Error.Message, nobodysRef, "REF")) {
			t.Errorf("acme's secret is refused otherwise than one nobody has:\n%v\n%v", acmes.Error, nobodys.Error)
		}
		if own := ask("s3", bRef); string(own.Value) != "join-token" {
			t.Errorf("globex's agent asked for its own secret: %q, %v", own.Value, own.Error)
		}
	})

	t.Run("inventory and acknowledgement naming acme's node", func(t *testing.T) {
		c := dialCrafted(t, bCreds)
		c.write(c.session, `{"type":"hello","hello":{"observedGeneration":0}}`)
		c.readMessage(c.session)
		c.write(c.session, fmt.Sprintf(`{"type":"inventory","node":%[1]q,"inventory":{"node":%[1]q,"section":"host","data":{"planted":true}}}`, a.ID))
		c.write(c.session, fmt.Sprintf(`{"type":"ack","node":%[1]q,"ack":{"node":%[1]q,"generation":%[2]d}}`, a.ID, before.spec.Generation))
		f.wait("globex's inventory stored", func() bool { return f.inventorySection(b.ID, proto.SectionHost) == `{"planted":true}` })
	})

	t.Run("commands and progress", func(t *testing.T) {
		c := dialCrafted(t, bCreds)
		c.write(c.session, `{"type":"hello","hello":{"observedGeneration":0}}`)
		c.readMessage(c.session)
		// A stream of its own making, answering acme's command: the registry lets the
		// agent open none besides its session stream, and reads none.
		if own, err := c.conn.OpenStream(); err == nil {
			c.write(own, `{"type":"result","result":{"id":"acme-cmd","result":"forged"}}`)
		}
		c.write(c.session, `{"type":"result","result":{"id":"acme-cmd","result":"forged"}}`) // ends the session
		c.drained()
		f.notAnswered(t, a.ID, "acme-cmd")

		c = dialCrafted(t, bCreds)
		c.write(c.session, `{"type":"hello","hello":{"observedGeneration":0}}`)
		c.readMessage(c.session)
		for _, id := range []string{"globex-1", "globex-2", "globex-3"} {
			f.relayed(t, b.ID, proto.RoleNode, id)
		}
		for range 3 {
			s, cmd := c.command()
			switch cmd.ID {
			case "globex-1": // progress of acme's run's step, then its own answer
				c.write(s, fmt.Sprintf(`{"type":"progress","progress":{"id":%q,"detail":{"planted":true}}}`, aStep))
				// The registry stops reading a command's stream at a message that is not
				// the command's, so this answer may find the stream stopped already.
				var stopped *quic.StreamError
				if err := c.send(s, `{"type":"result","result":{"id":"globex-1","result":"own"}}`); err != nil && !errors.As(err, &stopped) {
					t.Fatalf("writing globex-1's answer: %v", err)
				}
			case "globex-2": // the answer of its own other command
				c.write(s, `{"type":"result","result":{"id":"globex-3","result":"crossed"}}`)
			case "globex-3": // the answer of acme's command
				c.write(s, `{"type":"result","result":{"id":"acme-cmd","result":"forged"}}`)
			}
			s.Close()
			if b, err := c.read(s); err == nil {
				t.Errorf("the registry answered %s on the stream of %s", b, cmd.ID)
			}
		}
		f.notAnswered(t, a.ID, "acme-cmd")
		f.notAnswered(t, b.ID, "globex-2")
		if c3, err := f.agentCommand(b.ID, "globex-3"); err != nil || c3.Done && string(c3.Result) == `"crossed"` {
			t.Errorf("globex-3 took the answer sent on globex-2's stream: %+v (%v)", c3, err)
		}
		if p := run().Steps[0].Progress; len(p) > 0 {
			t.Errorf("acme's step took globex's progress %s", p)
		}
	})

	after := acmeNow()
	if after.spec.Generation != before.spec.Generation || after.status.ObservedGeneration != before.status.ObservedGeneration || len(after.inventory) != len(before.inventory) {
		t.Errorf("acme's node changed: spec generation %d -> %d, observed generation %d -> %d, inventory sections %d -> %d",
			before.spec.Generation, after.spec.Generation, before.status.ObservedGeneration, after.status.ObservedGeneration, len(before.inventory), len(after.inventory))
	}
	if wf := run(); wf.State != store.RunRunning || wf.Steps[0].State != store.StepRunning {
		t.Errorf("acme's run %s, its step %s", wf.State, wf.Steps[0].State)
	}
}

// TestASiteAgentReachesNothingOfAnotherSite: the host of site rack-b is taken, and its
// `bcd site` key (joined for real) speaks to the registry over real QUIC: through the
// real session code it reports a PXE discovery of the product UUID of a machine enrolled
// at rack-a without a MAC beside one of its own site's, and a cache report; with a client
// of its own it answers its own command with the id of a command relayed to rack-a's
// agent. Its own site's machine is proposed the MAC it saw; rack-a's machine is proposed
// none, rack-a's cache reports stay as they were, and rack-a's command stays unanswered.
func TestASiteAgentReachesNothingOfAnotherSite(t *testing.T) {
	f := startBusyFleet(t)
	ctx := t.Context()
	f.must(f.admin.Call(ctx, "sites.create", api.CreateSiteRequest{Name: "rack-b", BMCNetworks: []string{"10.0.1.0/24"}}, nil), "sites.create")
	f.must(f.tenants["globex"].Call(ctx, "pools.create", api.CreatePoolRequest{Name: "gpu-b", SiteID: "rack-b",
		Policy: api.PoolPolicy{HardwareProfile: "gpu-redfish"}}, nil), "pools.create")
	const uuidA, uuidB = "4c4c4544-0000-1000-8000-0000000000a1", "4c4c4544-0000-1000-8000-0000000000b1"
	a := storetest.Node(t, f.r.st, store.Node{Tenant: "acme", Pool: "gpu", Site: "rack-a", ProductUUID: uuidA})
	b := storetest.Node(t, f.r.st, store.Node{Tenant: "globex", Pool: "gpu-b", Site: "rack-b", ProductUUID: uuidB})
	creds, err := f.join("rack-b", "site", f.mintToken(api.CreateTokenRequest{Kind: store.TokenSite, NodeID: "rack-b", Site: "rack-b"}))
	if err != nil {
		t.Fatalf("rack-b's site agent joins: %v", err)
	}
	reports := func(site string) (r []store.SiteCacheReport) {
		f.must(f.r.st.View(func(tx *store.Tx) (err error) { r, err = tx.SiteCacheReports(site); return err }), "reading cache reports")
		return r
	}
	node := func(id string) (n store.Node) {
		f.must(f.r.st.View(func(tx *store.Tx) (err error) { n, err = tx.Node(id); return err }), "reading a node")
		return n
	}
	rackABefore := reports("rack-a")

	t.Run("discoveries and cache report", func(t *testing.T) {
		agent := f.newAgent("rack-b", creds)
		s := agent.start()
		seen := time.Now().UTC().Truncate(time.Second)
		disc, _ := json.Marshal([]proto.Discovery{
			{MAC: "52:54:00:aa:00:01", ProductUUID: uuidA, FirstSeen: seen, LastSeen: seen},
			{MAC: "52:54:00:bb:00:01", ProductUUID: uuidB, FirstSeen: seen, LastSeen: seen},
		})
		s.SetInventory(proto.SectionDiscoveries, disc)
		s.SetInventory(proto.SectionImages, json.RawMessage(`[{"digest":"`+strings.Repeat("ab", 32)+`","state":"ready","sizeBytes":1,"sources":["https://images.example.com/os.img"]}]`))
		defer agent.session(ctx, s)()
		f.wait("rack-b's own machine proposed the MAC it saw", func() bool { return node(b.ID).MACProposal != nil })
		f.wait("rack-b's cache report recorded", func() bool { return len(reports("rack-b")) == 1 })
		if p := node(a.ID).MACProposal; p != nil {
			t.Errorf("rack-b's discovery proposed rack-a's machine %s the MAC %s", a.ID, p.MAC)
		}
		if after := reports("rack-a"); len(after) != len(rackABefore) {
			t.Errorf("rack-b's cache report changed rack-a's: %+v -> %+v", rackABefore, after)
		}
	})

	t.Run("an answer to rack-a's command", func(t *testing.T) {
		f.relayed(t, "rack-a", proto.RoleSite, "rack-a-cmd")
		c := dialCrafted(t, creds)
		c.write(c.session, `{"type":"hello","hello":{"observedGeneration":0}}`)
		f.relayed(t, "rack-b", proto.RoleSite, "rack-b-cmd")
		for {
			s, cmd := c.command()
			if cmd.ID != "rack-b-cmd" {
				continue
			}
			c.write(s, `{"type":"result","result":{"id":"rack-a-cmd","result":"forged"}}`)
			s.Close()
			break
		}
		c.write(c.session, `{"type":"result","result":{"id":"rack-a-cmd","result":"forged"}}`) // ends the session
		c.drained()
		f.notAnswered(t, "rack-a", "rack-a-cmd")
		f.notAnswered(t, "rack-b", "rack-b-cmd")
	})
}
