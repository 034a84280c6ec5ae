package registry

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/registry/workflow"
)

// refusals is a log handler keeping the lines (messages and attributes) an agent logs
// at level from or above: at error, the refusals and their reasons.
type refusals struct {
	from    slog.Level
	mu      sync.Mutex
	reasons []string
}

func (r *refusals) Enabled(_ context.Context, l slog.Level) bool { return l >= r.from }

func (r *refusals) Handle(_ context.Context, rec slog.Record) error {
	line := rec.Message
	rec.Attrs(func(a slog.Attr) bool { line += " " + a.Key + "=" + a.Value.String(); return true })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, line)
	return nil
}

func (r *refusals) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *refusals) WithGroup(string) slog.Handler      { return r }

// count is how many of the lines logged so far contain s.
func (r *refusals) count(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, line := range r.reasons {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// firstInstallation joins node's agent of role with a token of kind, leaves the node
// active as its first deploy would, and runs the agent, its errors logged to refused,
// until stop; it returns once the agent's session is open.
func (f *busyFleet) firstInstallation(node string, role proto.Role, kind string) (kept *roleAgent, refused *refusals, stop func()) {
	f.t.Helper()
	creds, err := f.join(node, string(role), f.mint(kind, node))
	f.must(err, "the first installation's "+string(role)+" join")
	storetest.Update(f.t, f.r.st, func(tx *store.Tx) error {
		_, err := tx.UpdateNode(node, func(n *store.Node) error { n.State = store.NodeActive; return nil })
		return err
	})
	refused = &refusals{from: slog.LevelError}
	kept = &roleAgent{log: slog.New(refused)}
	stop = kept.run(f, node, creds)
	f.wait("the first installation's "+string(role)+" session", func() bool { return f.r.plane.ep.Connected(node, role) })
	f.settled(kept, node, role)
	return kept, refused, stop
}

// working makes a run on node in the store, running (claimed by another registry, so
// that no engine here runs it), and the node's last workflow, as a release's: a ramdisk
// joined with a token an operator minted is taken for it while it runs
// (store.Tx.CheckAgent). end ends it, succeeded.
func (f *busyFleet) working(node string) (end func()) {
	f.t.Helper()
	var run store.Run
	storetest.Update(f.t, f.r.st, func(tx *store.Tx) (err error) {
		if run, err = tx.CreateRun(store.Run{Kind: "release", Node: node, Tenant: storetest.Tenant, Document: json.RawMessage(`{}`),
			Steps: []store.RunStep{{Phase: "main"}}}); err != nil {
			return err
		}
		// Held by a registry of its own, which no engine here takes over.
		if _, err = tx.ClaimRun(run.ID, store.Holder{Replica: "rg_working", Started: tx.Now()}, time.Hour); err != nil {
			return err
		}
		_, err = tx.UpdateNode(node, func(n *store.Node) error { n.Workflow = run.ID; return nil })
		return err
	})
	return func() {
		storetest.Update(f.t, f.r.st, func(tx *store.Tx) error {
			_, err := tx.UpdateRun(run.ID, func(r *store.Run) error { r.State = store.RunSucceeded; return nil })
			return err
		})
	}
}

// settled waits until a, the agent of id in role, has nothing more to say unasked: it
// applied the NodeSpec of its role the store holds (if any), and the registry read its
// acknowledgement (a request written after it was answered: the registry reads a
// session's messages in order). Whatever an agent says once its certificate is no longer
// current ends its session.
func (f *busyFleet) settled(a *roleAgent, id string, role proto.Role) {
	f.t.Helper()
	var want int64
	f.must(f.r.st.View(func(tx *store.Tx) error {
		spec, err := tx.NodeSpec(id)
		if err == nil && spec.Role == role {
			want = spec.Generation
		}
		if proto.CodeOf(err) == proto.NotFound {
			return nil
		}
		return err
	}), "reading the NodeSpec")
	f.wait(id+"'s "+string(role)+" agent applying its NodeSpec", func() bool { return a.s.ObservedGeneration() == want })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := a.s.Secret(ctx, "secret://settled/none"); proto.CodeOf(err) == proto.InvalidState || proto.CodeOf(err) == proto.Timeout {
		f.t.Errorf("%s's %s agent: no answer after its acknowledgement: %v", id, role, err)
	}
}

// moveEpochUnheard moves node's identity epoch, as a deploy, release or retire does as it
// starts, in a commit whose hooks wait until the returned hear is called: until then
// the registry has not heard of the move (as a replica whose watch of the store is
// behind: the commit tells its hooks after the store's locks are released), and the
// sessions of the node's agents stay open.
func (f *busyFleet) moveEpochUnheard(node string) (hear func()) {
	f.t.Helper()
	return f.commitUnheard(store.BucketNodes, "moving the identity epoch", func(tx *store.Tx) error {
		_, err := tx.UpdateNode(node, func(n *store.Node) error { n.IdentityEpoch++; return nil })
		return err
	})
}

// getsNoSecretNorRenewal checks that a's session, of a certificate no longer current, is
// refused the secret ref and a renewal for key: FORBIDDEN with reason, its message
// saying says.
func (a *roleAgent) getsNoSecretNorRenewal(ctx context.Context, t *testing.T, ref string, key *ecdsa.PrivateKey, reason, says string) {
	t.Helper()
	refused := func(what string, err error) {
		t.Helper()
		if proto.CodeOf(err) != proto.Forbidden || proto.AsError(err).Details.Reason != reason || !strings.Contains(err.Error(), says) {
			t.Errorf("the %s: %v, want FORBIDDEN %s saying %q", what, err, reason, says)
		}
	}
	v, err := a.s.Secret(ctx, ref)
	refused("secret request", err)
	if v != nil {
		t.Errorf("a certificate no longer current got the secret %q", v)
	}
	_, err = a.s.Renew(ctx, key)
	refused("renewal", err)
}

// commitUnheard commits change, which writes bucket, in a commit whose hooks wait until
// the returned hear is called (moveEpochUnheard).
func (f *busyFleet) commitUnheard(bucket store.Bucket, what string, change func(*store.Tx) error) (hear func()) {
	f.t.Helper()
	committed, heard, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	unhook := f.r.st.OnWrite(func() { once.Do(func() { close(committed); <-heard }) }, bucket)
	go func() {
		defer close(done)
		f.must(f.r.st.Update(change), what)
	}()
	<-committed
	unhook()
	return func() { close(heard); <-done }
}

// TestEarlierInstallationsCertificatesStopWorking: the installed OS's certificate of a
// machine's first deploy is kept by its user (who had root on that OS), and the machine
// is released and deployed again. While its session stays open past the epoch's move
// (the registry holding it has not heard of it yet), the old certificate gets no secret
// its NodeSpec names, no renewal, a result it signs is not taken, and the NodeSpec
// stored next is not pushed to it: the push ends its session with CloseRevoked, saying
// the certificate belongs to an earlier installation; each of its later sessions is
// refused so, the release's through the API too. The agent of the new installation,
// joined with the new deploy's token, gets all of these. Before certificates named their
// installation, the old one kept working for a year.
func TestEarlierInstallationsCertificatesStopWorking(t *testing.T) {
	f := serveBusy(t, Config{})
	storetest.Fill(t, f.r.st)
	n := storetest.Node(t, f.r.st, store.Node{MACs: []string{"52:54:00:00:09:01"}})
	node, ref := n.ID, "secret://k8s/join"
	f.secretNamed(n, ref)
	ep := f.r.plane.ep

	// The first deploy's OS joins, and the deploy leaves the node active.
	kept, refused, stop := f.firstInstallation(node, proto.RoleNode, store.TokenProvisioned)
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	diagID := 0
	diagAsync := func() <-chan error {
		diagID++
		ch, id := make(chan error, 1), fmt.Sprintf("signed-%d", diagID)
		go func() {
			_, err := ep.Relay(ctx, node, proto.RoleNode, proto.Command{ID: id, Kind: proto.CommandDiagDCGM})
			ch <- err
		}()
		return ch
	}
	diag := func() error {
		t.Helper()
		return <-diagAsync()
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f.must(err, "a key")
	works := func(who string, a *roleAgent) {
		t.Helper()
		if v, err := a.s.Secret(ctx, ref); err != nil || string(v) != "join-token" {
			t.Errorf("%s: secret %q, %v; want its value", who, v, err)
		}
		if _, err := a.s.Renew(ctx, key); err != nil {
			t.Errorf("%s: renewal %v", who, err)
		}
		if err := diag(); err != nil {
			t.Errorf("%s: signed result not taken: %v", who, err)
		}
	}
	works("the first installation", kept)

	// A diagnosis is on its way when a release moves the node's epoch, which the
	// registry has not heard of yet: the session of the old certificate, still open, is
	// refused at every request, and the signed result it answers then is not taken.
	release := kept.holdAnswers(proto.CommandDiagDCGM)
	held := diagAsync()
	f.wait("the second diagnosis on its way", func() bool { return len(kept.received(proto.CommandDiagDCGM)) == 2 })
	hear := f.moveEpochUnheard(node)
	kept.getsNoSecretNorRenewal(ctx, t, ref, key, proto.ReasonEarlierInstallation, "earlier installation")
	release()
	if err := <-held; err == nil || !strings.Contains(err.Error(), "earlier installation") {
		t.Errorf("the kept certificate's signed result: %v, want refused as of an earlier installation", err)
	}

	// The next NodeSpec, stored before the registry heard of the move, is not pushed
	// to the old certificate: the push ends its session with CloseRevoked, its reason
	// the earlier installation.
	before := refused.count("earlier installation")
	f.must(f.hostSpec(node, 1, ref), "storing the next NodeSpec")
	var next proto.NodeSpec
	f.must(f.r.st.View(func(tx *store.Tx) (err error) { next, err = tx.NodeSpec(node); return err }), "reading the NodeSpec")
	f.wait("the kept certificate's session ended instead of the push", func() bool {
		return refused.count("earlier installation") > before && !ep.Connected(node, proto.RoleNode)
	})
	hear()
	if kept.agent.wasApplied(next.Generation) {
		t.Errorf("the kept certificate was pushed the next NodeSpec (generation %d)", next.Generation)
	}

	// The release through the API: every later session of the old certificate is
	// refused the same way.
	before = refused.count("earlier installation")
	_, err = call[api.TransitionStarted](f.admin, "metal.release", api.TransitionRequest{TenantID: n.Tenant, NodeID: node})
	f.must(err, "metal.release")
	f.wait("the kept certificate's next two sessions refused", func() bool {
		return refused.count("earlier installation") >= before+2 && !ep.Connected(node, proto.RoleNode)
	})
	_, err = call[api.TransitionStarted](f.admin, "metal.cancel", api.TransitionRequest{TenantID: n.Tenant, NodeID: node})
	f.must(err, "metal.cancel")

	// The machine deployed again: its new OS joins with its deploy's token, and works.
	secondCreds, err := f.join(node, "node", f.mint(store.TokenProvisioned, node))
	f.must(err, "the second installation's join")
	current := &roleAgent{}
	defer current.run(f, node, secondCreds)()
	f.wait("the second installation's session", func() bool { return ep.Connected(node, proto.RoleNode) })
	works("the second installation", current)
}

// TestEarlierRamdiskCertificatesStopWorking: the ramdisk of a machine's first deploy
// keeps running (a failed deploy, or its key found in RAM by the root user of the OS it
// kexec'd into), and the machine is released. While its session stays open past the
// epoch's move (the registry holding it has not heard of it yet), a wipe it signs is not
// taken (the wipe is answered FORBIDDEN, earlier-installation), and a wipe relayed then
// is not sent to it: the relay ends its session with
// CloseRevoked, saying its certificate belongs to an earlier installation, and each of
// its later sessions is refused so, the release's through the API too: the wipe never
// reaches it. The ramdisk the release boots, joined with that boot's token, gets the
// wipe and its signed result is attested. Before ramdisk certificates named their
// installation, the old one took the wipe and signed an attested result.
func TestEarlierRamdiskCertificatesStopWorking(t *testing.T) {
	f := serveBusy(t, Config{})
	storetest.Fill(t, f.r.st)
	n := storetest.Node(t, f.r.st, store.Node{MACs: []string{"52:54:00:00:09:02"}})
	node := n.ID
	ep := f.r.plane.ep

	// The first deploy's ramdisk joins and keeps running; the node is active.
	deployed := f.working(node)
	kept, refused, stop := f.firstInstallation(node, proto.RoleRamdisk, store.TokenRamdisk)
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type answer struct {
		w   attest.Wipe
		err error
	}
	wipeID := 0
	wipe := func() chan answer {
		wipeID++
		ch := make(chan answer, 1)
		go func() {
			out, err := f.r.plane.Relay(ctx, workflow.RelayTarget{NodeID: node, Role: profile.Ramdisk, Run: "wf_wipe", Step: proto.CommandDiskWipe},
				"wf_wipe:main.1:a"+string(rune('0'+wipeID)), proto.CommandDiskWipe, workflow.CommandInput{Payload: json.RawMessage(`{"mode":"quick"}`)})
			var w attest.Wipe
			if err == nil {
				err = json.Unmarshal(out, &w)
			}
			ch <- answer{w, err}
		}()
		return ch
	}
	if a := <-wipe(); a.err != nil || !a.w.Attested {
		t.Fatalf("the first deploy's ramdisk's wipe: %+v, %v; want it attested", a.w, a.err)
	}

	// A wipe is on its way when the epoch moves, which the registry has not heard of
	// yet: what the session, still open, signs then is not taken, and the wipe is
	// answered with the refusal.
	release := kept.holdAnswers(proto.CommandDiskWipe)
	held := wipe()
	f.wait("the second wipe on its way", func() bool { return len(kept.received(proto.CommandDiskWipe)) == 2 })
	hear := f.moveEpochUnheard(node)
	release()
	if a := <-held; a.w.Attested || proto.CodeOf(a.err) != proto.Forbidden || proto.AsError(a.err).Details.Reason != proto.ReasonEarlierInstallation {
		t.Errorf("the kept ramdisk's signed wipe: %+v, %v; want it refused, FORBIDDEN %s", a.w, a.err, proto.ReasonEarlierInstallation)
	}

	// A wipe relayed before the registry heard of the move is not sent to the kept
	// ramdisk: the relay ends its session with CloseRevoked, its reason the earlier
	// installation, and the wipe waits.
	before := refused.count("earlier installation")
	released := wipe()
	f.wait("the kept ramdisk's session ended instead of the wipe", func() bool {
		return refused.count("earlier installation") > before && !ep.Connected(node, proto.RoleRamdisk)
	})
	hear()

	// The release through the API: every later session of the kept ramdisk is refused
	// the same way, before any hello could hand it the pending wipe.
	before = refused.count("earlier installation")
	deployed()
	_, err := call[api.TransitionStarted](f.admin, "metal.release", api.TransitionRequest{TenantID: n.Tenant, NodeID: node})
	f.must(err, "metal.release")
	_, err = call[api.TransitionStarted](f.admin, "metal.cancel", api.TransitionRequest{TenantID: n.Tenant, NodeID: node})
	f.must(err, "metal.cancel")
	f.wait("the wipe still stored", func() bool {
		var pending []store.AgentCommand
		f.r.st.View(func(tx *store.Tx) (err error) { pending, err = tx.PendingAgentCommands(node); return err })
		return len(pending) == 1
	})
	f.wait("two more sessions of the kept ramdisk refused", func() bool {
		return refused.count("earlier installation") >= before+2 && !ep.Connected(node, proto.RoleRamdisk)
	})
	select {
	case a := <-released:
		t.Fatalf("the wipe answered with only the kept ramdisk running: %+v, %v", a.w, a.err)
	default:
	}
	if got := kept.received(proto.CommandDiskWipe); len(got) != 2 {
		t.Errorf("the kept ramdisk was sent disk.wipe %d times, want only the two before the move", len(got))
	}

	// The ramdisk the release boots joins with that boot's token and takes the wipe,
	// while the release runs (cancelled, its cleanup waits for the site agent).
	secondCreds, err := f.join(node, "ramdisk", f.mint(store.TokenRamdisk, node))
	f.must(err, "the release's ramdisk join")
	current := &roleAgent{}
	defer current.run(f, node, secondCreds)()
	if a := <-released; a.err != nil || !a.w.Attested {
		t.Errorf("the release's ramdisk's wipe: %+v, %v; want it attested", a.w, a.err)
	}
	if got := current.received(proto.CommandDiskWipe); len(got) != 1 {
		t.Errorf("the release's ramdisk ran disk.wipe %d times, want once", len(got))
	}
}

// TestOnlyTheRamdiskAttestsAWipe: the root user of a machine's installed OS reads its
// node-role key, of the current installation, and a disk.wipe reaches its agent by a
// path other than a workflow's and the relay's, which refuses it to the node role (here
// stored for the node role straight in the store, and sent over real QUIC): it signs
// "every disk wiped" for its own disk. The registry stores the wipe
// unattested, with none of the claimed disks, saying that only the ramdisk's signature
// counts; the ramdisk of the same installation, answering the same wipe, is attested.
// Before the verifier read the signing certificate's role, the node agent's wipe was
// stored as attested.
func TestOnlyTheRamdiskAttestsAWipe(t *testing.T) {
	f := serveBusy(t, Config{})
	storetest.Fill(t, f.r.st)
	node := storetest.Node(t, f.r.st, store.Node{MACs: []string{"52:54:00:00:09:03"}}).ID
	ep := f.r.plane.ep
	installed, _, stop := f.firstInstallation(node, proto.RoleNode, store.TokenProvisioned)
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wipe := func(role proto.Role, id string) attest.Wipe {
		t.Helper()
		cmd := proto.Command{ID: id, Kind: proto.CommandDiskWipe, Payload: json.RawMessage(`{"mode":"quick"}`)}
		var (
			out json.RawMessage
			err error
		)
		if role == proto.RoleRamdisk {
			out, err = ep.Relay(ctx, node, role, cmd)
		} else {
			out, err = storedAnswer(ctx, f, node, role, cmd)
		}
		var w attest.Wipe
		if err == nil {
			err = json.Unmarshal(out, &w)
		}
		f.must(err, "the "+string(role)+" agent's wipe")
		return w
	}
	w := wipe(proto.RoleNode, "wf_wipe:main.1:a1")
	if got := installed.received(proto.CommandDiskWipe); len(got) != 1 {
		t.Fatalf("the installed OS's agent signed %d wipes, want the one relayed to it", len(got))
	}
	if w.Attested || len(w.Disks) != 0 || w.Attestation == nil || !strings.Contains(w.Reason, "only when the node's ramdisk agent signs it") {
		t.Errorf("the installed OS's signed wipe: stored attested %v, disks %v (%s); want unattested, no disks, the reason naming the ramdisk", w.Attested, w.Disks, w.Reason)
	}

	defer f.working(node)()
	creds, err := f.join(node, string(proto.RoleRamdisk), f.mint(store.TokenRamdisk, node))
	f.must(err, "the ramdisk's join")
	ramdisk := &roleAgent{}
	defer ramdisk.run(f, node, creds)()
	f.wait("the ramdisk's session", func() bool { return ep.Connected(node, proto.RoleRamdisk) })
	if w := wipe(proto.RoleRamdisk, "wf_wipe:main.1:a2"); !w.Attested {
		t.Errorf("the ramdisk's signed wipe: not attested (%s)", w.Reason)
	}
}

// storedAnswer stores cmd for node's agent of role straight in the store, past the
// relay's check of its kind against the role, and returns the answer recorded once the
// agent's session got it and answered.
func storedAnswer(ctx context.Context, f *busyFleet, node string, role proto.Role, cmd proto.Command) (json.RawMessage, error) {
	err := f.r.st.Update(func(tx *store.Tx) error { _, err := tx.EnqueueAgentCommand(node, role, cmd, nil); return err })
	for err == nil {
		var c store.AgentCommand
		if err = f.r.st.View(func(tx *store.Tx) (err error) { c, err = tx.AgentCommand(node, cmd.ID); return err }); err != nil || c.Done {
			if c.Error != nil {
				return nil, c.Error
			}
			return c.Result, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil, err
}

// TestEarlierCertificatesAreNotHeard: an agent's certificate is kept past the commit
// that moved its epoch (a release of the machine; a site agent's revocation), on a
// registry that has not heard of the commit yet (another replica's, its watch behind),
// and its holder tells the registry what it likes on the session still open: an
// inventory section (a site's: PXE discoveries, from which the registry proposes
// machines), an acknowledgement of a NodeSpec generation, the answer of a command relayed
// before the move. None of it is stored: each is refused as the certificate's hello
// would be (FORBIDDEN, reason earlier-installation or revoked), a command is answered
// with that refusal, and the session ends (CloseRevoked). Before, each was stored until
// the registry heard of the move.
func TestEarlierCertificatesAreNotHeard(t *testing.T) {
	f := startBusyFleet(t)
	node := storetest.Node(t, f.r.st, store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:0a:11"}}).ID
	ep := f.r.plane.ep
	const site = "rack-a"
	forged := json.RawMessage(`[{"mac":"52:54:00:66:66:66","arch":"x86_64"}]`)

	// An agent of the current epoch, and the move of its epoch the registry holding its
	// session has not heard of.
	type agent struct {
		id, role, kind string
		move           func() (hear func())
		reason, says   string
	}
	machine := agent{node, "node", store.TokenProvisioned, func() func() { return f.moveEpochUnheard(node) },
		proto.ReasonEarlierInstallation, "earlier installation"}
	rack := agent{site, "site", store.TokenSite, func() func() {
		return f.commitUnheard(store.BucketSites, "revoking the site's agent", func(tx *store.Tx) error {
			_, _, err := tx.RevokeSiteAgent(site, store.Revocation{Reason: "rack server stolen"})
			return err
		})
	}, proto.ReasonRevoked, "rack server stolen"}

	for _, c := range []struct {
		what string
		agent
		// say has the kept agent a say what it says once the epoch moved (start, before
		// it, for a command to answer), and check that none of it was taken.
		say func(a *roleAgent, start func()) (check func())
	}{
		{"an inventory section", machine, func(a *roleAgent, start func()) func() {
			start()
			a.s.SetInventory("host", json.RawMessage(`{"forged":true}`))
			return func() {
				if got := f.inventorySection(node, "host"); strings.Contains(got, "forged") {
					t.Errorf("the earlier installation's inventory section was stored: %s", got)
				}
			}
		}},
		{"an acknowledgement", machine, func(a *roleAgent, start func()) func() {
			start()
			a.s.Acknowledge(77)
			return func() {
				if got := f.observedInStore(node); got == 77 {
					t.Errorf("the earlier installation's acknowledgement of generation 77 was stored")
				}
			}
		}},
		{"a command's answer", machine, f.answerRefused(t, node, proto.RoleNode, proto.ReasonEarlierInstallation)},
		{"a site's discoveries", rack, func(a *roleAgent, start func()) func() {
			start()
			a.s.SetInventory(proto.SectionDiscoveries, forged)
			return func() {
				if got := f.inventorySection(site, proto.SectionDiscoveries); strings.Contains(got, "66:66:66") {
					t.Errorf("the revoked site agent's discoveries were stored: %s", got)
				}
			}
		}},
		{"a site's command answer", rack, f.answerRefused(t, site, proto.RoleSite, proto.ReasonRevoked)},
	} {
		creds, err := f.join(c.id, c.role, f.mint(c.kind, c.id))
		f.must(err, c.what+": the agent's join")
		refused := &refusals{from: slog.LevelError}
		kept := &roleAgent{log: slog.New(refused)}
		stop := kept.run(f, c.id, creds)
		f.wait(c.what+": the agent's session", func() bool { return ep.Connected(c.id, proto.Role(c.role)) })
		f.settled(kept, c.id, proto.Role(c.role))
		before := refused.count(c.says)
		var hear func()
		check := c.say(kept, func() { hear = c.move() })
		f.wait(c.what+": the session ended with the refusal", func() bool {
			return refused.count(c.says) > before && !ep.Connected(c.id, proto.Role(c.role))
		})
		hear()
		stop()
		check()
	}
}

// answerRefused is what an agent of id in role says in TestEarlierCertificatesAreNotHeard:
// the answer of a command relayed to it while its certificate was current, answered once
// the epoch moved. The relay's caller gets the refusal (FORBIDDEN, reason), not the answer.
func (f *busyFleet) answerRefused(t *testing.T, id string, role proto.Role, reason string) func(a *roleAgent, start func()) func() {
	return func(a *roleAgent, start func()) func() {
		release := a.holdAnswers("echo")
		ch := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := f.r.plane.ep.Relay(ctx, id, role, proto.Command{ID: "answered-late-" + string(role), Kind: "echo", Payload: json.RawMessage(`{"ID":"late"}`)})
			ch <- err
		}()
		f.wait("the command on its way", func() bool { return len(a.received("echo")) == 1 })
		start()
		release()
		return func() {
			if err := <-ch; proto.CodeOf(err) != proto.Forbidden || proto.AsError(err).Details.Reason != reason {
				t.Errorf("the answer of %s's %s agent of an earlier epoch: %v, want the refusal, FORBIDDEN %s", id, role, err, reason)
			}
		}
	}
}

// TestEarlierInstallationsTokensJoinNothing: a machine's user kept the join token of
// their installation's user data unused (their own user data template never ran bcd
// join, or they stopped it), and a ramdisk token of a boot of it went unused; the
// machine is released. Neither token joins from then on (UNAUTHENTICATED, as a token
// that never existed): the release deleted them with the epoch's move. A token minted
// after joins at the new epoch. Before, the kept token joined at the new epoch, so its
// holder was the next installation's agent: the next tenant's NodeSpec, the secrets it
// names and its commands.
func TestEarlierInstallationsTokensJoinNothing(t *testing.T) {
	f := serveBusy(t, Config{})
	storetest.Fill(t, f.r.st)
	n := storetest.Node(t, f.r.st, store.Node{MACs: []string{"52:54:00:00:09:03"}})
	node := n.ID
	storetest.Update(t, f.r.st, func(tx *store.Tx) error {
		_, err := tx.UpdateNode(node, func(n *store.Node) error { n.State = store.NodeActive; return nil })
		return err
	})
	kept := map[string]string{"node": f.mint(store.TokenProvisioned, node), "ramdisk": f.mint(store.TokenRamdisk, node)}

	_, err := call[api.TransitionStarted](f.admin, "metal.release", api.TransitionRequest{TenantID: n.Tenant, NodeID: node})
	f.must(err, "metal.release")
	for role, token := range kept {
		if creds, err := f.join(node, role, token); proto.CodeOf(err) != proto.Unauthenticated {
			epoch := int64(-1)
			if err == nil {
				epoch = certificateEpoch(t, creds)
			}
			t.Errorf("the %s token minted before the release: %v (a certificate of epoch %d); want UNAUTHENTICATED", role, err, epoch)
		}
	}
	creds, err := f.join(node, "ramdisk", f.mint(store.TokenRamdisk, node))
	f.must(err, "the release's ramdisk's join")
	if epoch := certificateEpoch(t, creds); epoch != 1 {
		t.Errorf("the release's ramdisk's certificate names epoch %d, want 1", epoch)
	}
	_, err = call[api.TransitionStarted](f.admin, "metal.cancel", api.TransitionRequest{TenantID: n.Tenant, NodeID: node})
	f.must(err, "metal.cancel")
}
