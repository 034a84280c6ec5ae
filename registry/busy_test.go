package registry

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/agent/join"
	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/hardware/tpm"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/image"
	regjoin "github.com/better-compute/better-compute/registry/join"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/testkit/tpmboot"
)

// The tests of this file drive one registry in this process the way a busy fleet does:
// tenants' and the admin's API clients over HTTPS (and the admin socket), agents joining
// with single-use tokens and holding sessions over QUIC with the agents' own session
// code, NodeSpecs pushed while sessions come and go, commands relayed, workflows started
// and cancelled, and the registry closed in the middle of it all. Everything runs in one
// process, so `make test-race` watches the registry's own code while it does.

// busyHardwareProfiles is the data directory's hardware profiles file: a Redfish machine.
const busyHardwareProfiles = `{"version": 1, "hardwareProfiles": {
  "gpu-redfish": {"drivers": {"power": "redfish", "management": "redfish", "boot": "ipxe", "deploy": "image-stream", "inspect": "agent"}}}}`

// busyDeploy is the profile the tenants deploy: done when the installed OS's agent
// joins, with a host section that becomes the node's NodeSpec.
const busyDeploy = `{"id": "joins", "version": 1, "target": "metal",
  "hostConfig": {"hugepages": {"pages2m": 512}},
  "steps": [{"use": "wait.agentJoined", "with": {"role": "node"}, "timeout": "5m"}]}`

// busyTenants are the tenants of the fleet, besides the root tenant.
var busyTenants = []string{"acme", "globex"}

// busyFleet is a registry serving in this process, its admin's clients and the tenants'.
type busyFleet struct {
	t      *testing.T
	dir    string
	r      *Registry
	served <-chan error
	// admin is the root tenant's admin over HTTPS (admin.conf); host is the admin socket.
	admin, host *api.Client
	tenants     map[string]*api.Client
	// configs are the tenants' client configs.
	configs map[string]api.ClientConfig
	// machines are the agents of the installed machines, by node id, that the site
	// agent's power.setPower reboots.
	machines sync.Map
	// minted are the join tokens the admin minted (mintToken), by id: api.Token.
	minted sync.Map
	// credentials are the ids of the tenants' credentials populate made.
	credentials map[string]string
	// keepAlive is the period of its agents' pings (session.Config.KeepAlive), which
	// bounds their sessions' silence at four periods; 200 ms, to find a session gone
	// soon, when zero. Set it before the first agent starts.
	keepAlive time.Duration
}

// startBusyFleet starts a registry with a site rack-a (its image sources
// images.example.com), the tenants, each with a credential of its own and a pool gpu
// at rack-a.
func startBusyFleet(t *testing.T) *busyFleet {
	t.Helper()
	f := serveBusy(t, Config{})
	f.populate()
	return f
}

// serveBusy serves a registry made with cfg in a new data directory that holds the
// hardware profiles file (and admin.conf, when given one: a replica's), with the
// admin's clients.
func serveBusy(t *testing.T, cfg Config, adminConf ...string) *busyFleet {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, HardwareProfilesFile), []byte(busyHardwareProfiles), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, conf := range adminConf {
		copyFile(t, conf, filepath.Join(dir, AdminConfig))
	}
	cfg.DataDir, cfg.MetricsListen = dir, "127.0.0.1:0"
	f := &busyFleet{t: t, dir: dir, r: newTestRegistry(t, cfg), tenants: map[string]*api.Client{}, configs: map[string]api.ClientConfig{},
		credentials: map[string]string{}}
	f.served = serve(t, f.r)
	admin, err := api.LoadClientConfig(f.r.Info().AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if f.admin, err = api.NewClient(admin); err != nil {
		t.Fatal(err)
	}
	f.host = api.NewHostClient(dir)
	return f
}

// populate makes the site, the tenants, their credentials (each written as a client
// config and read back, as `credentials create --out` and the CLI do) and their pools.
func (f *busyFleet) populate() {
	t := f.t
	admin, err := api.LoadClientConfig(f.r.Info().AdminConfig)
	f.must(err, "loading admin.conf")
	f.must(f.admin.Call(context.Background(), "sites.create", api.CreateSiteRequest{Name: "rack-a", BMCNetworks: []string{"10.0.0.0/24"},
		ImageSources: []string{"images.example.com"}}, nil), "sites.create")
	for _, name := range busyTenants {
		f.must(f.admin.Call(context.Background(), "tenants.create", api.CreateTenantRequest{Name: name}, nil), "tenants.create")
		var made api.CreatedCredential
		f.must(f.admin.Call(context.Background(), "credentials.create", api.CreateCredentialRequest{TenantID: name, Actions: []string{
			api.ActionProfilesManage, api.ActionProfilesRead, api.ActionImagesPublish, api.ActionImagesRead,
			api.ActionPoolsManage, api.ActionNodesManage, api.ActionNodesRead}}, &made), "credentials.create")
		path := filepath.Join(t.TempDir(), name+".conf")
		f.must(api.WriteClientConfig(path, api.ClientConfig{Server: admin.Server, ServingCA: admin.ServingCA, Credential: made.Secret}), "writing a config")
		f.credentials[name] = made.ID
		tc, err := api.LoadClientConfig(path)
		f.must(err, "loading a config")
		f.addTenant(name, tc)
		f.must(f.tenants[name].Call(context.Background(), "pools.create", api.CreatePoolRequest{Name: "gpu", SiteID: "rack-a",
			Policy: api.PoolPolicy{HardwareProfile: "gpu-redfish"}}, nil), "pools.create")
	}
}

// addTenant adds tenant's client, calling this fleet's registry with cfg's credential.
func (f *busyFleet) addTenant(tenant string, cfg api.ClientConfig) {
	cfg.Server = f.r.Info().URL
	c, err := api.NewClient(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.tenants[tenant], f.configs[tenant] = c, cfg
}

// must fails the test (from any goroutine) when err is set, and says whether it was not.
func (f *busyFleet) must(err error, what string) bool {
	f.t.Helper()
	if err != nil {
		f.t.Errorf("%s: %v", what, err)
	}
	return err == nil
}

// provisioned is a new node of the fleet, enrolled with mac, and the credentials its
// installed OS's `bcd join` got with a provisioned token.
func (f *busyFleet) provisioned(mac string) (node string, creds bcdconf.Agent) {
	f.t.Helper()
	node = storetest.Node(f.t, f.r.st, store.Node{MACs: []string{mac}}).ID
	creds, err := f.join(node, "node", f.mint(store.TokenProvisioned, node))
	if err != nil {
		f.t.Fatalf("the installed OS's join: %v", err)
	}
	return node, creds
}

// call is c.Call with its answer as the result.
func call[Resp any](c *api.Client, method string, req any) (Resp, error) {
	return callCtx[Resp](context.Background(), c, method, req)
}

// callCtx is call within ctx.
func callCtx[Resp any](ctx context.Context, c *api.Client, method string, req any) (Resp, error) {
	var out Resp
	err := c.Call(ctx, method, req, &out)
	return out, err
}

// mint is a join token of kind for node (at site rack-a), minted by the admin.
func (f *busyFleet) mint(kind, node string) string {
	f.t.Helper()
	return f.mintToken(api.CreateTokenRequest{Kind: kind, NodeID: node, Site: "rack-a"})
}

// mintToken is the join token req asks the admin for; the fleet keeps it in minted.
func (f *busyFleet) mintToken(req api.CreateTokenRequest) string {
	f.t.Helper()
	made, err := call[api.CreatedToken](f.admin, "tokens.create", req)
	if f.must(err, "tokens.create") {
		f.minted.Store(made.ID, made.Token)
	}
	return made.Secret
}

// join runs bcd's join for node in role with token, as `bcd join` does, and returns the
// agent's credentials.
func (f *busyFleet) join(node, role, token string) (bcdconf.Agent, error) {
	dir, err := os.MkdirTemp(f.t.TempDir(), "join")
	if err != nil {
		return bcdconf.Agent{}, err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return bcdconf.Agent{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := join.Join(ctx, join.Options{Server: f.r.Info().URL, TokenFile: tokenFile, NodeID: node, Role: role,
		Pins: f.r.Info().Pins, ConfigDir: filepath.Join(dir, "bcd")})
	if err != nil {
		return bcdconf.Agent{}, err
	}
	return bcdconf.LoadAgent(res.ConfigDir)
}

// raceJoin joins node in role with one token minted for it, tried by three joiners at
// once: exactly one is admitted, the others are told the token was used.
func (f *busyFleet) raceJoin(kind, node, role string) bcdconf.Agent {
	token := f.mint(kind, node)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted []bcdconf.Agent
	)
	for range 3 {
		wg.Go(func() {
			creds, err := f.join(node, role, token)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				admitted = append(admitted, creds)
			} else if e := proto.AsError(err); e.Code != proto.Unauthenticated || e.Details.Reason != proto.ReasonTokenUsed {
				f.t.Errorf("a joiner of %s that lost the race: %v, want UNAUTHENTICATED %s", node, err, proto.ReasonTokenUsed)
			}
		})
	}
	wg.Wait()
	if len(admitted) != 1 {
		f.t.Errorf("one token of %s admitted %d joiners, want 1", node, len(admitted))
		return bcdconf.Agent{}
	}
	return admitted[0]
}

// fleetAgent is an agent of the fleet: its credentials, and what its sessions did.
type fleetAgent struct {
	f     *busyFleet
	node  string
	creds bcdconf.Agent

	mu sync.Mutex
	// applied are the generations the agent's sessions applied (and so acknowledged).
	applied map[int64]proto.NodeSpec
	// last is the last spec applied; observed the generation its next start has.
	last     proto.NodeSpec
	observed int64
	// ran counts the relayed commands run, by id.
	ran map[string]int
	// reboot restarts the agent's session (runRebooting), as the machine's power cycle
	// does.
	reboot chan struct{}
	// stallNext makes the next apply stall, after sending its generation on stalled,
	// until its session ends.
	stallNext atomic.Bool
	stalled   chan int64
	// handlers are the agent's handlers besides the fleet's own (echo and the BMC's).
	handlers map[string]session.Handler
	// log is where its sessions log; nowhere when nil.
	log *slog.Logger
}

func (f *busyFleet) newAgent(node string, creds bcdconf.Agent) *fleetAgent {
	return &fleetAgent{f: f, node: node, creds: creds, applied: map[int64]proto.NodeSpec{}, ran: map[string]int{},
		reboot: make(chan struct{}, 1), stalled: make(chan int64, 1)}
}

// runRebooting runs the agent's sessions until ctx ends: a new one after each reboot.
func (a *fleetAgent) runRebooting(ctx context.Context) {
	for ctx.Err() == nil {
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { a.run(sctx, a.start()); close(done) }()
		select {
		case <-a.reboot:
		case <-ctx.Done():
		}
		stop()
		<-done
	}
}

// setPower is the site agent's power.setPower: the machine's agent reboots.
func (f *busyFleet) setPower(_ context.Context, p json.RawMessage) (json.RawMessage, error) {
	var cmd proto.SiteCommand
	if err := json.Unmarshal(p, &cmd); err != nil {
		return nil, err
	}
	if a, ok := f.machines.Load(cmd.Node); ok {
		select {
		case a.(*fleetAgent).reboot <- struct{}{}:
		default:
		}
	}
	return json.RawMessage(`{}`), nil
}

// echo answers a relayed command with its payload.
func (a *fleetAgent) echo(_ context.Context, p json.RawMessage) (json.RawMessage, error) {
	var in struct{ ID string }
	if err := json.Unmarshal(p, &in); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.ran[in.ID]++
	a.mu.Unlock()
	return p, nil
}

// on answers the site's BMC reads: the machine is on and its BMC tells nothing more.
func on(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }

// start makes a new session of the agent, as a restarted bcd does: it says hello with
// the generation its last session applied.
func (a *fleetAgent) start() *session.Agent {
	a.mu.Lock()
	observed := a.observed
	a.mu.Unlock()
	handlers := map[string]session.Handler{"echo": a.echo, "power.getPower": on, "inspect.oob": on, "power.setPower": a.f.setPower}
	maps.Copy(handlers, a.handlers)
	s, err := session.New(session.Config{
		Addr: a.creds.Config.AgentEndpoint, Certificate: a.creds.Certificate, ServerCAs: a.creds.ServingCAs,
		ObservedGeneration: observed,
		Handlers:           handlers,
		Apply: func(ctx context.Context, spec proto.NodeSpec) error {
			if a.stallNext.CompareAndSwap(true, false) {
				a.stalled <- spec.Generation
				<-ctx.Done() // the session ends in the middle of applying it
				return ctx.Err()
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			a.applied[spec.Generation] = spec
			a.last = spec
			return nil
		},
		Backoff:   session.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		KeepAlive: cmp.Or(a.f.keepAlive, 200*time.Millisecond),
		Log:       cmp.Or(a.log, slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		a.f.t.Fatal(err)
	}
	return s
}

// run runs session s until ctx ends, then keeps what it observed for the next start.
func (a *fleetAgent) run(ctx context.Context, s *session.Agent) {
	s.Run(ctx)
	a.mu.Lock()
	a.observed = max(a.observed, s.ObservedGeneration())
	a.mu.Unlock()
}

// session runs session s until ctx ends or end is called, which waits for it.
func (a *fleetAgent) session(ctx context.Context, s *session.Agent) (end func()) {
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { a.run(ctx, s); close(done) }()
	return func() { stop(); <-done }
}

// lastApplied is the spec the agent applied last.
func (a *fleetAgent) lastApplied() proto.NodeSpec {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// wasApplied says whether the agent applied generation (0: none yet, always true).
func (a *fleetAgent) wasApplied(generation int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.applied[generation]
	return ok || generation == 0
}

// runs is how often the agent ran the command id.
func (a *fleetAgent) runs(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ran[id]
}

// observedInStore is the generation the store records node's agent applied.
func (f *busyFleet) observedInStore(node string) int64 {
	var st store.AgentStatus
	f.r.st.View(func(tx *store.Tx) error { st, _ = tx.AgentStatus(node); return nil })
	return st.ObservedGeneration
}

// bump stores a new NodeSpec of node, its labels the round.
func (f *busyFleet) bump(node string, round int) error {
	return f.r.st.Update(func(tx *store.Tx) error {
		_, err := tx.SetNodeSpec(proto.NodeSpec{Node: node, Role: proto.RoleNode, Labels: map[string]string{"round": fmt.Sprint(round)}})
		return err
	})
}

// wait polls cond until it holds; after three minutes (a guard against a hang, not a
// measure: under the race detector on a busy two-core machine one op took more than a
// minute to happen three times) it fails the test with what.
func (f *busyFleet) wait(what string, cond func() bool) bool {
	f.t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	f.t.Errorf("never: %s", what)
	return false
}

// signer is a tenant's image signer: an Ed25519 key.
type signer struct {
	id  string
	key ed25519.PrivateKey
}

func newSigner(t *testing.T, id string) signer {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{id, key}
}

func (s signer) publicPEM() string {
	der, _ := x509.MarshalPKIXPublicKey(s.key.Public())
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// image is a request registering the image ref, signed by s.
func (s signer) image(ref string) api.RegisterImageRequest {
	sum := sha256.Sum256([]byte(ref))
	req := api.RegisterImageRequest{Ref: ref, Kind: proto.KindOS, Format: proto.FormatQcow2, Compression: proto.CompressionNone,
		SHA256: hex.EncodeToString(sum[:]), SizeBytes: new(int64(1 << 30)), Source: "https://images.example.com/" + strings.ReplaceAll(ref, "@", "-") + ".qcow2", SignerID: s.id}
	input := image.SigningInput(store.Image{Kind: req.Kind, Ref: req.Ref, Format: req.Format, Compression: req.Compression, SHA256: req.SHA256})
	req.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(s.key, input))
	return req
}

// TestBusyFleet drives one registry as a busy fleet does, all at once: each tenant's
// clients race to create the same profile versions (a profile of the same id as the
// other tenant's), register signed images (their signers added over the admin socket
// meanwhile) and pre-warm them, enroll machines, deploy and cancel, and list and follow
// what they have; the admin mints join tokens that three joiners each race for; node
// agents come and go, restarting and reconnecting (once with two sessions side by side,
// and every other time in the middle of applying a push), while their NodeSpecs move and
// commands are relayed to them (some by several relays at once); the site agent answers
// the enrollments' BMC reads and is pushed the pre-warmed images; the deploys end as
// their agents join, or cancelled, or both at once; then the deployed nodes are
// remediated at once, each restarted by the site agent and waited for until its agent
// rejoins and applies its NodeSpec again. Each consumed token admits one, each profile
// version is created once, every generation the store records as acknowledged is one the
// agent applied, every relay gets its own command's answer, which the agent ran once,
// tenants see only their own, and at the end every agent is recorded at its NodeSpec.
func TestBusyFleet(t *testing.T) {
	f := startBusyFleet(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The site agent joins (its token raced) and answers the BMC reads from now on.
	siteAgent := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	if t.Failed() {
		t.FailNow()
	}
	var agents sync.WaitGroup
	agents.Go(func() { siteAgent.run(ctx, siteAgent.start()) })

	var work sync.WaitGroup
	// The tenants: profiles raced, images, pools pre-warmed, nodes deployed and cancelled.
	// How each tenant's three deploys end: the node's agent joins; the deploy is
	// cancelled while it waits; both at once.
	const (
		joins = iota
		cancelled
		both
	)
	type deployed struct {
		tenant, node, workflow string
		fate                   int
	}
	var (
		mu      sync.Mutex
		deploys []deployed
		images  = map[string][]string{}
	)
	for ti, tenant := range busyTenants {
		c := f.tenants[tenant]
		work.Go(func() { f.raceProfiles(tenant, c) })
		work.Go(func() {
			refs := f.publishImages(tenant, c, newSigner(t, "k-"+tenant))
			mu.Lock()
			images[tenant] = refs
			mu.Unlock()
		})
		for i := range 3 {
			work.Go(func() {
				node, ok := f.enrollReady(c, ti, i)
				if !ok {
					return
				}
				if i == 0 {
					f.must(c.Call(context.Background(), "profiles.create", api.CreateProfileRequest{Document: api.Document(busyDeploy)}, nil), "profiles.create")
				}
				f.wait("the deploy profile", func() bool {
					_, err := call[api.ProfileView](c, "profiles.get", api.ProfileKey{ID: "joins"})
					return err == nil
				})
				started, err := call[api.DeployStarted](c, "metal.deploy", api.DeployRequest{NodeID: node.ID, ProfileID: "joins"})
				if !f.must(err, "metal.deploy") {
					return
				}
				mu.Lock()
				deploys = append(deploys, deployed{tenant, node.ID, started.WorkflowID, i})
				mu.Unlock()
				f.follow(c, started.WorkflowID)
			})
		}
	}
	for i := range 2 {
		work.Go(func() { f.listOwn(busyTenants[i], busyTenants[1-i]) })
	}

	// The loose agents: each joins with a raced token, then restarts and reconnects while
	// its NodeSpec moves and commands are relayed to it.
	const loose, rounds, duplicated = 4, 6, 2
	fleet := make([]*fleetAgent, loose)
	for i := range loose {
		work.Go(func() {
			node := fmt.Sprintf("gpu-%d", i)
			a := f.newAgent(node, f.raceJoin(store.TokenProvisioned, node, "node"))
			mu.Lock()
			fleet[i] = a
			mu.Unlock()
			if a.creds.Certificate.Certificate == nil {
				return
			}
			for round := range rounds {
				f.must(f.bump(node, round), "storing a NodeSpec")
				s := a.start()
				sctx, stop := context.WithCancel(ctx)
				var sessions sync.WaitGroup
				sessions.Go(func() { a.run(sctx, s) })
				if round == duplicated {
					// The agent started again while its old process still runs: the
					// two sessions replace each other.
					twin := a.start()
					sessions.Go(func() { a.run(sctx, twin) })
				}
				for k := range 3 {
					id := fmt.Sprintf("c-%s-%d-%d", node, round, k)
					payload := fmt.Sprintf(`{"ID":%q}`, id)
					// The registry's relays of one command at once (a step and its
					// retry) share the agent's one answer.
					var relays sync.WaitGroup
					for range 1 + k%2*2 {
						relays.Go(func() {
							rctx, rcancel := context.WithTimeout(ctx, time.Minute)
							defer rcancel()
							got, err := f.r.plane.ep.Relay(rctx, node, proto.RoleNode, proto.Command{ID: id, Kind: "echo", Payload: json.RawMessage(payload)})
							if err != nil || string(got) != payload {
								t.Errorf("relay %s: %s, %v; want its own payload back", id, got, err)
							}
						})
					}
					relays.Wait()
					if k == 1 {
						f.must(f.bump(node, 100+round), "storing a NodeSpec") // pushed while the session runs
					}
				}
				if round%2 == 1 {
					// The session ends while the agent applies a push.
					a.stallNext.Store(true)
					f.must(f.bump(node, 200+round), "storing a NodeSpec")
					select {
					case <-a.stalled:
					case <-time.After(time.Minute):
						t.Errorf("%s never applied the NodeSpec of round %d", node, 200+round)
					}
				}
				stop()
				sessions.Wait()
			}
		})
	}
	// A watcher: the store never records as acknowledged a generation the agent did not apply.
	watching := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Go(func() {
		for {
			mu.Lock()
			joined := slices.Clone(fleet)
			mu.Unlock()
			for _, a := range joined {
				if a == nil {
					continue
				}
				if gen := f.observedInStore(a.node); !a.wasApplied(gen) {
					t.Errorf("the store records that %s applied generation %d, which it never applied", a.node, gen)
				}
			}
			select {
			case <-watching:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	work.Wait()
	close(watching)
	watcher.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// The deploys end, all at once: one that is cancelled as its agent joins ends either
	// way, its node and its workflow saying the same.
	var ends sync.WaitGroup
	for _, d := range deploys {
		c := f.tenants[d.tenant]
		ends.Go(func() {
			if d.fate != joins {
				ends.Go(func() {
					_, err := call[api.TransitionStarted](c, "metal.cancel", api.TransitionRequest{NodeID: d.node})
					if err != nil && (d.fate == cancelled || proto.CodeOf(err) != proto.InvalidState) {
						t.Errorf("cancelling the deploy of %s: %v", d.node, err)
					}
				})
			}
			if d.fate != cancelled {
				a := f.newAgent(d.node, f.raceJoin(store.TokenProvisioned, d.node, "node"))
				f.machines.Store(d.node, a)
				agents.Go(func() { a.runRebooting(ctx) })
			}
			f.wait("the deploy of "+d.node+" ends", func() bool {
				wf, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: d.workflow})
				return err == nil && wf.State != store.RunRunning
			})
		})
	}
	ends.Wait()
	var active []deployed
	for _, d := range deploys {
		c := f.tenants[d.tenant]
		n, err := call[api.NodeView](c, "metal.get", api.NodeKey{NodeID: d.node})
		f.must(err, "metal.get")
		wf, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: d.workflow})
		f.must(err, "workflows.get")
		switch {
		case d.fate != cancelled && n.State == store.NodeActive && wf.State == store.RunSucceeded:
			active = append(active, d)
			a, _ := f.machines.Load(d.node)
			f.wait("node "+d.node+" applies its host section", func() bool {
				spec := a.(*fleetAgent).lastApplied()
				return spec.Host != nil && f.observedInStore(d.node) == spec.Generation
			})
		case d.fate != joins && n.State == store.NodeFailed && wf.State == store.RunFailed && n.Failure != nil &&
			n.Failure.Error.Details.Reason == proto.ReasonCancelled:
		default:
			t.Errorf("node %s (fate %d): %s, %+v; its deploy %s", d.node, d.fate, n.State, n.Failure, wf.State)
		}
	}

	// The active nodes are remediated all at once: the site agent restarts each (its
	// agent's session restarts), whose workflow waits for the agent to rejoin and to
	// apply its NodeSpec again (wait.generationObserved).
	var remediations sync.WaitGroup
	for _, d := range active {
		c := f.tenants[d.tenant]
		remediations.Go(func() {
			started, err := call[api.TransitionStarted](c, "metal.remediate", api.RemediateRequest{NodeID: d.node, Profile: "remediate-reboot"})
			if !f.must(err, "metal.remediate") {
				return
			}
			f.wait("node "+d.node+" remediated", func() bool {
				wf, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: started.WorkflowID})
				return err == nil && wf.State != store.RunRunning
			})
			wf, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: started.WorkflowID})
			if err != nil || wf.State != store.RunSucceeded {
				t.Errorf("remediating %s: %s %+v, %v", d.node, wf.State, wf.Failure, err)
			}
		})
	}
	remediations.Wait()

	// Every loose agent, connected once more, is recorded at its NodeSpec, which it applied.
	for _, a := range fleet {
		agents.Go(func() { a.run(ctx, a.start()) })
		var want int64
		f.r.st.View(func(tx *store.Tx) error { spec, _ := tx.NodeSpec(a.node); want = spec.Generation; return nil })
		f.wait(a.node+" recorded at generation "+fmt.Sprint(want), func() bool {
			return a.lastApplied().Generation == want && f.observedInStore(a.node) == want
		})
		// Each command ran once, but where two sessions of the agent ran side by side,
		// each of which runs a command at most once.
		for round := range rounds {
			for k := range 3 {
				id := fmt.Sprintf("c-%s-%d-%d", a.node, round, k)
				if n := a.runs(id); n != 1 && (round != duplicated || n < 1 || n > 2) {
					t.Errorf("%s ran %s %d times, whose answer the relay returned", a.node, id, n)
				}
			}
		}
	}
	// The site agent is pushed every tenant's pre-warmed images.
	f.waitCacheImages(siteAgent, images)

	// Used tokens are listed as used.
	tokens, err := call[api.TokenList](f.admin, "tokens.list", api.ListRequest{Limit: store.MaxPage})
	f.must(err, "tokens.list")
	for _, tok := range tokens.Tokens {
		if tok.UsedAt.IsZero() {
			t.Errorf("token %s of %s: never used, though an agent joined with it", tok.ID, tok.NodeID)
		}
	}
	cancel()
	agents.Wait()
}

// enrollReady enrolls machine i of the tenant numbered ti with the tenant's client c
// and waits until its node is ready; false when it failed, which the test is told.
func (f *busyFleet) enrollReady(c *api.Client, ti, i int) (api.Node, bool) {
	node, err := call[api.Node](c, "metal.enroll", api.EnrollRequest{Pool: "gpu", MACs: []string{fmt.Sprintf("52:54:00:00:%02x:%02x", ti, i)},
		BMC: api.BMC{Driver: "redfish", Address: fmt.Sprintf("https://10.0.0.%d", 10*ti+i+1)}})
	if !f.must(err, "metal.enroll") {
		return node, false
	}
	return node, f.wait("node "+node.ID+" ready", func() bool {
		n, err := call[api.NodeView](c, "metal.get", api.NodeKey{NodeID: node.ID})
		return err == nil && n.State == store.NodeReady
	})
}

// raceProfiles has four clients of tenant create each version of one profile at once:
// one is stored, the others are CONFLICT. The other tenant has a profile of the same id,
// which neither sees of the other.
func (f *busyFleet) raceProfiles(tenant string, c *api.Client) {
	for version := 1; version <= 3; version++ {
		doc := fmt.Sprintf(`{"id": "shared", "version": %d, "target": "metal", "steps": [{"use": "wait.agentJoined", "with": {"role": "node"}}]}`, version)
		var created atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				v, err := call[api.ProfileView](c, "profiles.create", api.CreateProfileRequest{Document: api.Document(doc)})
				switch {
				case err == nil && v.TenantID == tenant && v.Version == version:
					created.Add(1)
				case proto.CodeOf(err) != proto.Conflict:
					f.t.Errorf("%s creates shared@%d: %+v, %v; want it stored or CONFLICT", tenant, version, v, err)
				}
			})
		}
		wg.Wait()
		if n := created.Load(); n != 1 {
			f.t.Errorf("%s created shared@%d %d times, want once", tenant, version, n)
		}
	}
	f.must(c.Call(context.Background(), "profiles.create", api.CreateProfileRequest{Document: api.Document(
		`{"id": "only-` + tenant + `", "version": 1, "target": "metal", "steps": [{"use": "wait.agentJoined", "with": {"role": "node"}}]}`)}, nil), "profiles.create")
}

// publishImages registers three images of tenant signed by s, once the admin has added
// s to the tenant's allowlist over the admin socket, and pre-warms them at its pool.
func (f *busyFleet) publishImages(tenant string, c *api.Client, s signer) []string {
	_, err := call[api.ImageSigner](f.host, "signers.add", api.AddSignerRequest{TenantID: tenant, ID: s.id, PublicKey: s.publicPEM()})
	if !f.must(err, "signers.add") {
		return nil
	}
	var refs []string
	for i := range 3 {
		ref := fmt.Sprintf("%s-os@2026.%d", tenant, i+1)
		_, err := call[api.Image](c, "images.register", s.image(ref))
		if !f.must(err, "images.register "+ref) {
			return nil
		}
		refs = append(refs, ref)
		_, err = call[api.Pool](c, "pools.update", api.UpdatePoolRequest{Name: "gpu", PrewarmImages: &refs})
		f.must(err, "pools.update")
	}
	return refs
}

// follow follows a workflow as `--wait` does, until it ends or waits for its node's agent.
func (f *busyFleet) follow(c *api.Client, id string) {
	rev := 0
	for {
		wf, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: id, AfterRev: rev})
		if !f.must(err, "workflows.get") || wf.State != store.RunRunning || wf.Steps[0].State == store.StepRunning {
			return
		}
		rev = wf.Rev
	}
}

// listOwn lists tenant's profiles, images, nodes and their events and workflows while
// the others work, and checks that everything listed is tenant's (or the platform's
// shipped profiles), and that other's nodes and profiles are NOT_FOUND to tenant.
func (f *busyFleet) listOwn(tenant, other string) {
	c := f.tenants[tenant]
	for range 20 {
		profiles, err := call[api.ProfileList](c, "profiles.list", api.ListProfilesRequest{})
		f.must(err, "profiles.list")
		for _, p := range profiles.Profiles {
			if p.TenantID != tenant && p.TenantID != store.BuiltinTenant || p.ID == "only-"+other {
				f.t.Errorf("%s lists %s's profile %s@%d", tenant, p.TenantID, p.ID, p.Version)
			}
		}
		if _, err := call[api.ProfileView](c, "profiles.get", api.ProfileKey{ID: "only-" + other}); err != nil && proto.CodeOf(err) != proto.NotFound {
			f.t.Errorf("%s gets only-%s: %v, want NOT_FOUND", tenant, other, err)
		} else if err == nil {
			f.t.Errorf("%s gets %s's profile only-%s", tenant, other, other)
		}
		images, err := call[api.ImageList](c, "images.list", api.ListImagesRequest{})
		f.must(err, "images.list")
		for _, img := range images.Images {
			if img.Tenant != tenant {
				f.t.Errorf("%s lists %s's image %s", tenant, img.Tenant, img.Ref)
			}
		}
		nodes, err := call[api.NodeList](c, "metal.list", api.ListNodesRequest{})
		f.must(err, "metal.list")
		for _, n := range nodes.Nodes {
			if n.Tenant != tenant {
				f.t.Errorf("%s lists %s's node %s", tenant, n.Tenant, n.ID)
			}
			events, err := call[api.EventList](c, "metal.events", api.EventsRequest{NodeID: n.ID})
			f.must(err, "metal.events")
			for _, e := range events.Events {
				if e.NodeID != n.ID {
					f.t.Errorf("%s's events of node %s hold one of %s", tenant, n.ID, e.NodeID)
				}
			}
			if n.Workflow != "" {
				_, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: n.Workflow})
				f.must(err, "workflows.get")
			}
		}
		// The other tenant's nodes and their workflows are not found.
		others, err := call[api.NodeList](f.tenants[other], "metal.list", api.ListNodesRequest{})
		f.must(err, "metal.list")
		for _, n := range others.Nodes {
			if _, err := call[api.NodeView](c, "metal.get", api.NodeKey{NodeID: n.ID}); proto.CodeOf(err) != proto.NotFound {
				f.t.Errorf("%s gets %s's node %s: %v, want NOT_FOUND", tenant, other, n.ID, err)
			}
			if _, err := call[api.EventList](c, "metal.events", api.EventsRequest{NodeID: n.ID}); proto.CodeOf(err) != proto.NotFound {
				f.t.Errorf("%s lists the events of %s's node %s: %v, want NOT_FOUND", tenant, other, n.ID, err)
			}
			if n.Workflow == "" {
				continue
			}
			if _, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: n.Workflow}); proto.CodeOf(err) != proto.NotFound {
				f.t.Errorf("%s gets %s's workflow %s: %v, want NOT_FOUND", tenant, other, n.Workflow, err)
			}
		}
	}
}

// registryGoroutines are the stacks of the goroutines that run the registry's code, or
// a server it started (the API's connections, the store): what must be gone once it is
// closed. A goroutine of the test (a client waiting for its answer) is not one. Those
// Close ended may take a moment to return: it looks again for up to two seconds.
func registryGoroutines() (left []string) {
	for range 100 {
		if left = runningRegistry(); len(left) == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return left
}

// runningRegistry is registryGoroutines at this moment.
func runningRegistry() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		registry, test := false, false
		for _, line := range strings.Split(g, "\n") {
			line = strings.TrimSpace(line)
			file, _, _ := strings.Cut(line, ":")
			test = test || strings.HasSuffix(file, "_test.go")
			registry = registry || strings.Contains(file, "/registry/") && strings.HasSuffix(file, ".go") ||
				strings.HasPrefix(line, "net/http.(*conn).serve") || strings.HasPrefix(line, "go.etcd.io/bbolt")
		}
		if registry && !test {
			left = append(left, g)
		}
	}
	return left
}

// TestCloseWhileBusy closes the registry while everything of TestBusyFleet goes on at
// once, Prometheus scrapes its metrics, and calls wait on the registry (workflows
// followed, event logs awaited, the console's live pages): Close returns, Serve
// returns nil, the live pages end, no goroutine of the registry is left, a call after it is
// UNAVAILABLE, and the store, opened again, holds only what the agents acknowledged.
func TestCloseWhileBusy(t *testing.T) {
	f := startBusyFleet(t)
	agentsCtx, stopAgents := context.WithCancel(context.Background())
	var agents sync.WaitGroup
	defer func() { stopAgents(); agents.Wait() }()
	siteAgent := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	agents.Go(func() { siteAgent.run(agentsCtx, siteAgent.start()) })
	// A node of each tenant whose deploy waits for an agent that never comes.
	waiting := map[string]api.Node{}
	for i, tenant := range busyTenants {
		c := f.tenants[tenant]
		node, err := call[api.Node](c, "metal.enroll", api.EnrollRequest{Pool: "gpu", MACs: []string{fmt.Sprintf("52:54:00:00:01:%02x", i)},
			BMC: api.BMC{Driver: "redfish", Address: fmt.Sprintf("https://10.0.0.%d", i+1)}})
		f.must(err, "metal.enroll")
		f.wait("node "+node.ID+" ready", func() bool {
			n, err := call[api.NodeView](c, "metal.get", api.NodeKey{NodeID: node.ID})
			return err == nil && n.State == store.NodeReady
		})
		f.must(c.Call(context.Background(), "profiles.create", api.CreateProfileRequest{Document: api.Document(busyDeploy)}, nil), "profiles.create")
		started, err := call[api.DeployStarted](c, "metal.deploy", api.DeployRequest{NodeID: node.ID, ProfileID: "joins"})
		f.must(err, "metal.deploy")
		node.Workflow = started.WorkflowID
		waiting[tenant] = node
	}
	if t.Failed() {
		t.FailNow()
	}
	loose := make([]*fleetAgent, 3)
	for i := range loose {
		node := fmt.Sprintf("gpu-%d", i)
		loose[i] = f.newAgent(node, f.raceJoin(store.TokenProvisioned, node, "node"))
	}
	// Each tenant's browser follows its waiting node's deploy on the console's live page.
	livePages := map[string]chan error{}
	for _, tenant := range busyTenants {
		livePages[tenant] = f.openLive(f.signIn(f.configs[tenant]), waiting[tenant].ID)
	}

	// The storm: each worker loops until stopped; what fails once the registry closes is
	// expected, what fails before is not.
	var (
		closing  atomic.Bool
		stopped  = make(chan struct{})
		workers  sync.WaitGroup
		ops      sync.Map // worker name -> *atomic.Int64
		callsCtx context.Context
	)
	callsCtx, cancelCalls := context.WithCancel(context.Background())
	defer cancelCalls()
	report := func(err error, what string) {
		if err != nil && !closing.Load() {
			t.Errorf("%s before the registry closed: %v", what, err)
		}
	}
	// worker runs op in a loop; the registry closes once it started op atLeast times.
	worker := func(name string, atLeast int64, op func(i int)) {
		n := &atomic.Int64{}
		ops.Store(name, [2]any{n, atLeast})
		workers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stopped:
					return
				default:
				}
				if closing.Load() {
					time.Sleep(time.Millisecond) // what is left to do is to stop
					continue
				}
				n.Add(1)
				op(i)
			}
		})
	}
	for _, tenant := range busyTenants {
		c, node := f.tenants[tenant], waiting[tenant]
		worker(tenant+" creates profiles", 3, func(i int) {
			_, err := callCtx[api.ProfileView](callsCtx, c, "profiles.create", api.CreateProfileRequest{Document: api.Document(fmt.Sprintf(
				`{"id": "p-%d", "version": 1, "target": "metal", "steps": [{"use": "wait.agentJoined", "with": {"role": "node"}}]}`, i))})
			report(err, tenant+" profiles.create")
		})
		worker(tenant+" lists", 3, func(int) {
			_, err := callCtx[api.ProfileList](callsCtx, c, "profiles.list", api.ListProfilesRequest{})
			report(err, tenant+" profiles.list")
			_, err = callCtx[api.NodeList](callsCtx, c, "metal.list", api.ListNodesRequest{})
			report(err, tenant+" metal.list")
		})
		worker(tenant+" follows the workflow", 1, func(int) {
			wf, err := callCtx[api.WorkflowView](callsCtx, c, "workflows.get", api.GetWorkflowRequest{ID: node.Workflow})
			report(err, tenant+" workflows.get")
			if err == nil {
				_, err = callCtx[api.WorkflowView](callsCtx, c, "workflows.get", api.GetWorkflowRequest{ID: node.Workflow, AfterRev: wf.Rev})
				report(err, tenant+" workflows.get afterRev")
			}
		})
		worker(tenant+" awaits events", 1, func(int) {
			ev, err := callCtx[api.EventList](callsCtx, c, "metal.events", api.EventsRequest{NodeID: node.ID})
			report(err, tenant+" metal.events")
			if err == nil {
				_, err = callCtx[api.EventList](callsCtx, c, "metal.events", api.EventsRequest{NodeID: node.ID, AfterSeq: ev.LastSeq, Wait: true})
				report(err, tenant+" metal.events wait")
			}
		})
	}
	worker("admin joins", 3, func(i int) {
		node := fmt.Sprintf("joiner-%d", i)
		made, err := callCtx[api.CreatedToken](callsCtx, f.admin, "tokens.create", api.CreateTokenRequest{Kind: store.TokenProvisioned, NodeID: node})
		report(err, "tokens.create")
		if err == nil {
			_, err = f.join(node, "node", made.Secret)
			report(err, "join")
		}
	})
	worker("Prometheus scrapes", 3, func(int) {
		req, _ := http.NewRequestWithContext(callsCtx, http.MethodGet, f.r.Info().MetricsURL, nil)
		resp, err := http.DefaultClient.Do(req)
		report(err, "scraping the metrics")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			report(err, "reading the metrics")
		}
	})
	for _, a := range loose {
		relayed := &atomic.Int64{} // the relays to a answered
		worker(a.node+" restarts", 3, func(int) {
			s := a.start()
			ctx, stop := context.WithCancel(agentsCtx)
			done := make(chan struct{})
			go func() { a.run(ctx, s); close(done) }()
			for !s.Connected() && !closing.Load() && agentsCtx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			// Each session is held until a relay to the agent was answered, a second at
			// most: stopped as soon as it connected, the sessions left no room for a
			// relay's round trip under the race detector on two busy cores, and the
			// relays to the agent never completed three times.
			for before, held := relayed.Load(), time.Now(); relayed.Load() == before && time.Since(held) < time.Second && !closing.Load() && agentsCtx.Err() == nil; {
				time.Sleep(time.Millisecond)
			}
			stop()
			<-done
		})
		worker(a.node+" is pushed", 3, func(i int) {
			report(f.bump(a.node, i), "storing a NodeSpec")
		})
		worker(a.node+" is relayed to", 3, func(i int) {
			id := fmt.Sprintf("x-%s-%d", a.node, i)
			got, err := f.r.plane.ep.Relay(callsCtx, a.node, proto.RoleNode, proto.Command{ID: id, Kind: "echo", Payload: json.RawMessage(fmt.Sprintf(`{"ID":%q}`, id))})
			report(err, "relay "+id)
			if err == nil && !strings.Contains(string(got), id) {
				t.Errorf("relay %s answered %s", id, got)
			}
			if err == nil {
				relayed.Add(1)
			}
		})
	}
	ops.Range(func(name, v any) bool {
		n, atLeast := v.([2]any)[0].(*atomic.Int64), v.([2]any)[1].(int64)
		return f.wait(fmt.Sprintf("%s %d times", name, atLeast), func() bool { return n.Load() >= atLeast })
	})

	closing.Store(true)
	if err := f.r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-f.served:
		if err != nil {
			t.Errorf("Serve after Close: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return after Close")
	}
	for tenant, ended := range livePages {
		select {
		case err := <-ended:
			if err != nil {
				t.Errorf("%s's live page: %v", tenant, err)
			}
		case <-time.After(time.Minute):
			t.Errorf("%s's live page goes on after Close", tenant)
		}
	}
	// The callers still waiting for answers wait on: nothing of the registry runs for them.
	for _, g := range registryGoroutines() {
		t.Errorf("a goroutine of the registry left after Close:\n%s", g)
	}
	if err := f.admin.Call(context.Background(), "profiles.list", api.ListProfilesRequest{}, nil); proto.CodeOf(err) != proto.Unavailable {
		t.Errorf("a call after Close: %v, want UNAVAILABLE", err)
	}
	close(stopped)
	cancelCalls()
	stopAgents()
	workers.Wait()
	agents.Wait()

	// Opened again, the store records for each agent a generation it applied.
	again := newTestRegistry(t, Config{DataDir: f.dir})
	for _, a := range loose {
		var st store.AgentStatus
		again.st.View(func(tx *store.Tx) error { st, _ = tx.AgentStatus(a.node); return nil })
		if !a.wasApplied(st.ObservedGeneration) {
			t.Errorf("the store records that %s applied generation %d, which it never applied", a.node, st.ObservedGeneration)
		}
	}
}

// TestCloseAnswersWaitingCalls: a client following a workflow (workflows.get afterRev)
// and one awaiting a node's events (metal.events wait) when the registry closes are
// answered at once with what is known, rather than having their connections cut, or
// waiting on a registry whose store is released.
func TestCloseAnswersWaitingCalls(t *testing.T) {
	f := startBusyFleet(t)
	c := f.tenants["acme"]
	// No site agent answers: the enrollment's workflow waits at its first BMC read.
	node, err := call[api.Node](c, "metal.enroll", api.EnrollRequest{Pool: "gpu", MACs: []string{"52:54:00:00:02:01"},
		BMC: api.BMC{Driver: "redfish", Address: "https://10.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	var wf api.WorkflowView
	var events api.EventList
	f.wait("the enrollment waits for the site agent", func() bool {
		n, err := call[api.NodeView](c, "metal.get", api.NodeKey{NodeID: node.ID})
		if err != nil || n.Workflow == "" {
			return false
		}
		wf, err = call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: n.Workflow})
		return err == nil && wf.Steps[0].State == store.StepRunning
	})
	events, err = call[api.EventList](c, "metal.events", api.EventsRequest{NodeID: node.ID})
	if err != nil {
		t.Fatal(err)
	}
	// Each call waits again, from what it was told, when a change answers it before the
	// registry closes (the enrollment's workflow may move on, on a loaded machine): what
	// is checked is the answer of the calls waiting when Close begins.
	var closing atomic.Bool
	answers := make(chan error, 2)
	follow := func(ask func() error) {
		for {
			late := closing.Load()
			err := ask()
			if closing.Load() {
				if late {
					err = nil // began after Close: not a call that waited
				}
				answers <- err
				return
			}
			if err != nil {
				answers <- err
				return
			}
		}
	}
	go follow(func() error {
		got, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: wf.ID, AfterRev: wf.Rev})
		if err == nil {
			wf = got
		}
		return err
	})
	go follow(func() error {
		got, err := call[api.EventList](c, "metal.events", api.EventsRequest{NodeID: node.ID, AfterSeq: events.LastSeq, Wait: true})
		if err == nil && got.LastSeq > events.LastSeq {
			events = got
		}
		return err
	})
	f.wait("both calls waiting in the registry", func() bool {
		stacks := strings.Join(runningRegistry(), "\n")
		return strings.Contains(stacks, "workflow.(*Engine).Watch") && strings.Contains(stacks, "registerEvents")
	})
	closing.Store(true)
	if err := f.r.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-answers; err != nil {
			t.Errorf("a call waiting as the registry closed: %v, want its answer", err)
		}
	}
}

// TestRevocationsRaceTheirUse revokes while the revoked is in use, as an admin reacting
// to a leak does: a credential a tenant's clients are calling with, and join tokens that
// joiners are presenting. A call that starts after the revocation answered is refused
// (UNAUTHENTICATED), whatever was under way; a token is either revoked or admits one
// joiner, never both, and one revoked admits none.
func TestRevocationsRaceTheirUse(t *testing.T) {
	// The race makes many calls with revoked credentials from one address: the bound on
	// failed checks by address (TestAStrangersFailedCredentialsAreRefusedBeforeTheCheck)
	// would refuse them before the check this test is about.
	f := serveBusy(t, Config{AuthFailures: api.FailureLimits{Off: true}})
	f.populate()
	made, err := call[api.CreatedCredential](f.admin, "credentials.create", api.CreateCredentialRequest{TenantID: "acme", Actions: []string{api.ActionProfilesRead}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := api.LoadClientConfig(f.r.Info().AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Credential = made.Secret
	leaked, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var revoked atomic.Bool
	var calls atomic.Int64
	var users sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		users.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				after := revoked.Load()
				_, err := call[api.ProfileList](leaked, "profiles.list", api.ListProfilesRequest{})
				calls.Add(1)
				switch {
				case after && proto.CodeOf(err) != proto.Unauthenticated:
					t.Errorf("a call with the credential begun after its revocation answered: %v, want UNAUTHENTICATED", err)
				case err != nil && proto.CodeOf(err) != proto.Unauthenticated:
					t.Errorf("a call with the credential: %v", err)
				}
			}
		})
	}
	// The tokens: each revoked while two joiners present it.
	type outcome struct {
		revoked  bool
		admitted int
	}
	outcomes := make([]outcome, 8)
	var tokens sync.WaitGroup
	for i := range outcomes {
		tokens.Go(func() {
			node := fmt.Sprintf("gpu-%d", i)
			tok, err := call[api.CreatedToken](f.admin, "tokens.create", api.CreateTokenRequest{Kind: store.TokenProvisioned, NodeID: node})
			if !f.must(err, "tokens.create") {
				return
			}
			var joins sync.WaitGroup
			var admitted atomic.Int32
			for range 2 {
				joins.Go(func() {
					_, err := f.join(node, "node", tok.Secret)
					if err == nil {
						admitted.Add(1)
					} else if proto.CodeOf(err) != proto.Unauthenticated {
						t.Errorf("a joiner of %s: %v, want it admitted or UNAUTHENTICATED", node, err)
					}
				})
			}
			_, err = call[api.Token](f.admin, "tokens.revoke", api.RevokeTokenRequest{ID: tok.ID})
			if err != nil && proto.CodeOf(err) != proto.InvalidState {
				t.Errorf("revoking %s's token: %v, want it revoked or INVALID_STATE (used)", node, err)
			}
			joins.Wait()
			outcomes[i] = outcome{err == nil, int(admitted.Load())}
		})
	}
	f.wait("calls with the credential", func() bool { return calls.Load() >= 10 })
	_, err = call[api.Credential](f.admin, "credentials.revoke", api.RevokeCredentialRequest{ID: made.ID})
	if err != nil {
		t.Fatal(err)
	}
	revoked.Store(true)
	from := calls.Load()
	f.wait("calls with the revoked credential", func() bool { return calls.Load() >= from+10 })
	close(stop)
	users.Wait()
	tokens.Wait()
	for i, o := range outcomes {
		if o.revoked && o.admitted != 0 || !o.revoked && o.admitted != 1 {
			t.Errorf("token of gpu-%d: revoked %v, and admitted %d joiners", i, o.revoked, o.admitted)
		}
	}
}

// TestBusyReplicas drives two registries sharing one etcd store (a real three-member
// cluster), as a fleet behind replicas does: the tenants call the second while the
// agents hold their sessions with the first, so every command, NodeSpec and join crosses
// from one replica to the other through the store's watch and its hooks, and the first
// is followed (events awaited) while the second commits. Enrollments relayed to the site
// agent through the other replica complete, deploys complete when the node agents join
// the first, each NodeSpec the second writes is pushed by the first and recorded as
// applied, the site agent is pushed the images pre-warmed through the second, and the
// tenants see only their own through either.
func TestBusyReplicas(t *testing.T) {
	agentSide, apiSide := startBusyReplicas(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var agents sync.WaitGroup
	defer func() { cancel(); agents.Wait() }()
	siteAgent := agentSide.newAgent("rack-a", agentSide.raceJoin(store.TokenSite, "rack-a", "site"))
	agents.Go(func() { siteAgent.run(ctx, siteAgent.start()) })

	var work sync.WaitGroup
	var mu sync.Mutex
	var machines []*fleetAgent
	images := map[string][]string{}
	for ti, tenant := range busyTenants {
		c := apiSide.tenants[tenant]
		work.Go(func() {
			refs := apiSide.publishImages(tenant, c, newSigner(t, "k-"+tenant))
			mu.Lock()
			images[tenant] = refs
			mu.Unlock()
		})
		apiSide.must(c.Call(context.Background(), "profiles.create", api.CreateProfileRequest{Document: api.Document(busyDeploy)}, nil), "profiles.create")
		for i := range 2 {
			work.Go(func() {
				node, err := call[api.Node](c, "metal.enroll", api.EnrollRequest{Pool: "gpu", MACs: []string{fmt.Sprintf("52:54:00:00:%02x:%02x", ti, i)},
					BMC: api.BMC{Driver: "redfish", Address: fmt.Sprintf("https://10.0.0.%d", 10*ti+i+1)}})
				if !apiSide.must(err, "metal.enroll") {
					return
				}
				// Its events are awaited on the other replica while this one writes them.
				fctx, unfollow := context.WithCancel(ctx)
				work.Go(func() { agentSide.followEvents(fctx, agentSide.tenants[tenant], node.ID) })
				defer unfollow()
				apiSide.wait("node "+node.ID+" ready", func() bool {
					n, err := call[api.NodeView](c, "metal.get", api.NodeKey{NodeID: node.ID})
					return err == nil && n.State == store.NodeReady
				})
				started, err := call[api.DeployStarted](c, "metal.deploy", api.DeployRequest{NodeID: node.ID, ProfileID: "joins"})
				if !apiSide.must(err, "metal.deploy") {
					return
				}
				a := agentSide.newAgent(node.ID, agentSide.raceJoin(store.TokenProvisioned, node.ID, "node"))
				agents.Go(func() { a.run(ctx, a.start()) })
				mu.Lock()
				machines = append(machines, a)
				mu.Unlock()
				apiSide.wait("the deploy of "+node.ID+" succeeded", func() bool {
					wf, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: started.WorkflowID})
					return err == nil && wf.State == store.RunSucceeded
				})
			})
		}
	}
	for i := range 2 {
		work.Go(func() { apiSide.listOwn(busyTenants[i], busyTenants[1-i]) })
	}
	work.Wait()

	for _, a := range machines {
		agentSide.wait(a.node+" applies the NodeSpec the other replica wrote", func() bool {
			spec := a.lastApplied()
			return spec.Host != nil && apiSide.observedInStore(a.node) == spec.Generation
		})
	}
	agentSide.waitCacheImages(siteAgent, images)
}

// startBusyReplicas starts two registries sharing one etcd store (a real three-member
// cluster) and clk (nil: the real clock), the fleet populated through the first: the
// agents' side and the API's side, whose tenants call with the credentials of the
// first's.
func startBusyReplicas(t *testing.T, clk clock.Clock) (agentSide, apiSide *busyFleet) {
	return startSkewedReplicas(t, clk, clk)
}

// startSkewedReplicas is startBusyReplicas with a clock each: the agents' side's
// agentClk, the API's side's apiClk (nil: the real clock), as replicas whose clocks
// disagree run.
func startSkewedReplicas(t *testing.T, agentClk, apiClk clock.Clock) (agentSide, apiSide *busyFleet) {
	cluster := etcdtest.Start(t)
	cfg := Config{Store: StoreConfig{Backend: "etcd", EtcdEndpoints: cluster.Endpoints}, KEKFile: filepath.Join(t.TempDir(), "kek"), Clock: agentClk}
	agentSide = serveBusy(t, cfg)
	agentSide.populate()
	cfg.Clock = apiClk
	apiSide = serveBusy(t, cfg, agentSide.r.Info().AdminConfig)
	for tenant, tc := range agentSide.configs {
		apiSide.addTenant(tenant, tc)
	}
	return agentSide, apiSide
}

// waitCacheImages waits until the site agent has applied a NodeSpec whose cache images
// are the images pre-warmed (refs by tenant), and the store records it applied.
func (f *busyFleet) waitCacheImages(site *fleetAgent, images map[string][]string) {
	var want []string
	for _, refs := range images {
		want = append(want, refs...)
	}
	slices.Sort(want)
	f.wait(fmt.Sprintf("the site agent applies the cache images %v", want), func() bool {
		spec := site.lastApplied()
		var got []string
		if spec.Site != nil {
			for _, img := range spec.Site.CacheImages {
				got = append(got, img.Ref)
			}
		}
		slices.Sort(got)
		return slices.Equal(got, want) && f.observedInStore(site.node) == spec.Generation
	})
}

// followEvents follows node's events as `nodes events --follow` does, until ctx ends.
func (f *busyFleet) followEvents(ctx context.Context, c *api.Client, node string) {
	var after uint64
	for {
		events, err := callCtx[api.EventList](ctx, c, "metal.events", api.EventsRequest{NodeID: node, AfterSeq: after, Wait: true})
		if ctx.Err() != nil || !f.must(err, "metal.events") {
			return
		}
		for _, e := range events.Events {
			if e.NodeID != node || e.Seq <= after {
				f.t.Errorf("following %s after seq %d: event %d of %s", node, after, e.Seq, e.NodeID)
			}
			after = e.Seq
		}
	}
}

// TestBusyAgentsAsk drives what node agents ask of a busy registry, all at once: each
// node of each tenant asks for the secrets its NodeSpec names while its NodeSpec moves,
// reports its inventory, answers node-signed diag.dcgm commands (one of them signed with
// another node's key) and renews its certificate in the middle of a command, while the
// admin puts, lists and deletes other secrets and join tokens are minted, and days pass:
// each round a node ends moves the registry's clock two days on, and the registry's own
// housekeeping prunes at the new time. A node gets its own tenant's value of a secret
// both tenants have, and never another node's secret (FORBIDDEN); an answer on the
// session stream tells that the inventory sent before it is stored, so the last one sent
// is the one that stays; a signed result is taken from the session's certificate and
// from the renewed one, and refused when another node's key signed it; the session that
// renewed keeps going (docs/agent-plane.md), and a new one with the renewed certificate
// is served as the node. After each prune the join tokens and the events past their
// retention are gone, the old ones going while the nodes still work, and every younger
// one, every node, NodeSpec, join, acknowledged generation and workflow run is still
// there, and a pending command until it is agents.CommandTTL old, not after
// (retention.check); the tenants following their nodes' events
// get each once, in order.
func TestBusyAgentsAsk(t *testing.T) {
	clk := newShiftedClock(-busyPast)
	f := serveBusy(t, Config{Clock: clk})
	f.populate()
	f.agentsAsk(f, clk)
}

// TestBusyReplicasAgentsAsk is TestBusyAgentsAsk across two registries sharing one etcd
// store and one clock, as TestBusyReplicas runs them: the agents hold their sessions with
// the first, while the admin puts the secrets, the NodeSpecs and the events are written
// and the diag.dcgm commands relayed through the second, so the secrets sealed by one
// replica are opened by the other, the signed results the first verifies reach the
// second's relays, and both replicas' housekeeping prunes the one store.
func TestBusyReplicasAgentsAsk(t *testing.T) {
	clk := newShiftedClock(-busyPast)
	agentSide, apiSide := startBusyReplicas(t, clk)
	agentSide.agentsAsk(apiSide, clk)
}

// busyPast is how far in the past the clock of the tests that let days pass starts:
// more than they move it on, so that each certificate the registry issues is valid by
// the real time its peers verify it with.
const busyPast = 60 * 24 * time.Hour

// busyDay is how far the clock moves each time a node ends a round of agentsAsk: the six
// rounds of four nodes move it 48 days, past the retention of the events and the join
// tokens (30 days, 15 of these), not past that of a token of the longest lifetime.
const busyDay = 48 * time.Hour

// agentsAsk is TestBusyAgentsAsk with the agents' sessions held by f's registry, and
// the tenants' and the admin's calls, the NodeSpecs, the events and the relays going
// through by's, both registries on clk.
func (f *busyFleet) agentsAsk(by *busyFleet, clk *shiftedClock) {
	t := f.t
	ctx, cancel := context.WithCancel(context.Background())
	var agents sync.WaitGroup
	defer func() { cancel(); agents.Wait() }()
	siteAgent := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	agents.Go(func() { siteAgent.run(ctx, siteAgent.start()) })

	// Join tokens of the longest lifetime, which expire in the middle of the days that
	// pass and are kept past the end; and a command for a node whose agent never comes,
	// which waits a day (agents.CommandTTL) and is then forgotten.
	for i := range 2 {
		by.mintToken(api.CreateTokenRequest{Kind: store.TokenProvisioned, NodeID: fmt.Sprintf("long-%d", i), TTLSeconds: int64(regjoin.MaxTTL / time.Second)})
	}
	var parked store.AgentCommand
	f.must(by.r.st.Update(func(tx *store.Tx) (err error) {
		parked, err = tx.EnqueueAgentCommand(parkedNode, proto.RoleNode, proto.Command{ID: parkedCommand, Kind: "echo"}, nil)
		return err
	}), "enqueueing a command")

	// From now on: the admin's secrets and tokens, while the nodes enroll and join and
	// then ask.
	quiet := make(chan struct{})
	var background sync.WaitGroup
	var adminOps atomic.Int64
	stopBackground := sync.OnceFunc(func() { close(quiet); background.Wait() })
	defer stopBackground()
	background.Go(func() { adminOps.Store(by.adminWrites(quiet)) })

	// Two nodes of each tenant, each NodeSpec naming the tenant's secret of a name both
	// tenants use, and the node's own.
	const shared = "secret://k8s/join"
	var (
		mu       sync.Mutex
		machines []*fleetAgent
		tenantOf = map[string]string{}
		enrolled sync.WaitGroup
	)
	for ti, tenant := range busyTenants {
		_, err := call[api.PutSecret](by.admin, "secrets.put", api.PutSecretRequest{TenantID: tenant, Ref: shared, Value: []byte("join-" + tenant)})
		f.must(err, "secrets.put")
		for i := range 2 {
			enrolled.Go(func() {
				node, ok := f.enrollReady(by.tenants[tenant], ti, i)
				if !ok {
					return
				}
				_, err := call[api.PutSecret](by.admin, "secrets.put", api.PutSecretRequest{TenantID: tenant, Ref: ownSecret(node.ID), Value: []byte("own-" + node.ID)})
				f.must(err, "secrets.put")
				f.must(by.hostSpec(node.ID, 0, shared, ownSecret(node.ID)), "storing a NodeSpec")
				a := f.newAgent(node.ID, f.raceJoin(store.TokenProvisioned, node.ID, "node"))
				mu.Lock()
				defer mu.Unlock()
				machines, tenantOf[node.ID] = append(machines, a), tenant
			})
		}
	}
	enrolled.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Days pass as the nodes work: each round a node ends moves the clock of the
	// registries on, and waits for their housekeeping to prune at the new time.
	kept := newRetention(f, by, machines, tenantOf)
	kept.parkedAt = parked.CreatedAt
	registries := len(slices.Compact([]*Registry{f.r, by.r}))
	var (
		paceMu              sync.Mutex
		paced, firstPruning int
		// relaying is held shared by each relay in flight and whole by each move of the
		// clock: a relay waits at most its step's timeout, a day at most
		// (agents.CommandTTL), so no day passes while one waits. (A command in flight when
		// the clock jumps two days would be forgotten as nobody's.)
		relaying sync.RWMutex
	)
	advance := func(d time.Duration) time.Time {
		relaying.Lock()
		defer relaying.Unlock()
		return clk.Advance(d)
	}
	relay := func(node, id string, forge bool) {
		relaying.RLock()
		defer relaying.RUnlock()
		by.dcgm(ctx, node, id, forge)
	}
	pace := func(node string) {
		paceMu.Lock()
		defer paceMu.Unlock()
		now := advance(busyDay - time.Hour)
		f.wait("the housekeeping of the day", func() bool { return clk.armed(housekeepingInterval) == registries })
		paced++
		if kept.check(now) > 0 && firstPruning == 0 {
			firstPruning = paced
		}
		// Records whose ages at the later checks come within an hour of their
		// retention, on either side: an event of the check's time (15 checks on, it is
		// a moment past its retention), and an hour later another, and tokens that
		// expire at once and in 46 hours (15 and 16 checks on, an hour within and an
		// hour past theirs).
		kept.event(node, fmt.Sprintf("check %d", paced))
		advance(time.Hour)
		kept.event(node, fmt.Sprintf("check %d, an hour on", paced))
		for _, ttl := range []time.Duration{time.Second, busyDay - 2*time.Hour} {
			by.mintToken(api.CreateTokenRequest{Kind: store.TokenProvisioned, NodeID: fmt.Sprintf("paced-%d", paced), TTLSeconds: int64(ttl / time.Second)})
		}
	}
	// Each machine's neighbour is the next one, of the other tenant or of its own.
	for i, a := range machines {
		n := machines[(i+1)%len(machines)]
		a.handlers = map[string]session.Handler{proto.CommandDiagDCGM: a.dcgm(n.node, n.creds.Certificate)}
	}

	const rounds, renewAt = 6, 3
	var work, followers sync.WaitGroup
	for i, a := range machines {
		neighbour := machines[(i+1)%len(machines)].node
		// Its tenant follows its events while housekeeping prunes the old ones.
		fctx, unfollow := context.WithCancel(ctx)
		followers.Go(func() { by.followEvents(fctx, by.tenants[tenantOf[a.node]], a.node) })
		work.Go(func() {
			defer unfollow()
			s := a.start()
			end := a.session(ctx, s)
			defer func() { end() }()
			for round := range rounds {
				f.must(by.hostSpec(a.node, round, shared, ownSecret(a.node)), "storing a NodeSpec")
				inv := fmt.Sprintf(`{"round":%d}`, round)
				s.SetInventory(proto.SectionGPUs, json.RawMessage(inv))
				if v, err := s.Secret(ctx, ownSecret(a.node)); err != nil || string(v) != "own-"+a.node {
					t.Errorf("%s asks for its own secret: %q, %v", a.node, v, err)
				}
				if got := f.inventorySection(a.node, proto.SectionGPUs); got != inv {
					t.Errorf("%s's secret was answered after it sent inventory %s; the store holds %s", a.node, inv, got)
				}
				if v, err := s.Secret(ctx, shared); err != nil || string(v) != "join-"+tenantOf[a.node] {
					t.Errorf("%s of %s asks for %s: %q, %v; want its tenant's", a.node, tenantOf[a.node], shared, v, err)
				}
				if v, err := s.Secret(ctx, ownSecret(neighbour)); proto.CodeOf(err) != proto.Forbidden || v != nil {
					t.Errorf("%s asks for %s's secret: %q, %v; want FORBIDDEN", a.node, neighbour, v, err)
				}
				kept.event(a.node, fmt.Sprintf("round %d", round))
				var relays sync.WaitGroup
				relays.Go(func() { relay(a.node, fmt.Sprintf("dcgm-%s-%d", a.node, round), false) })
				relays.Go(func() { relay(a.node, fmt.Sprintf("forged-%s-%d", a.node, round), true) })
				if round == renewAt {
					// Renewed while the commands run, whose results either key signs.
					key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
					var cert tls.Certificate
					if err == nil {
						cert, err = s.Renew(ctx, key)
					}
					if err != nil {
						t.Errorf("%s renews its certificate: %v", a.node, err)
						relays.Wait()
						return
					}
					// The session that renewed keeps going.
					if v, err := s.Secret(ctx, ownSecret(a.node)); !s.Connected() || err != nil || string(v) != "own-"+a.node {
						t.Errorf("%s's session after it renewed: connected %v, its secret %q, %v", a.node, s.Connected(), v, err)
					}
					relays.Wait()
					end()
					// A new one presents the renewed certificate and is served as the node.
					a.creds.Certificate = cert
					s = a.start()
					end = a.session(ctx, s)
				}
				relays.Wait()
				pace(a.node)
			}
		})
	}
	work.Wait()
	followers.Wait()
	stopBackground()
	if adminOps.Load() == 0 {
		t.Errorf("the admin's calls ran %d times while the agents asked", adminOps.Load())
	}
	// The first records past their retention went while rounds were left to work.
	if firstPruning == 0 || firstPruning == paced {
		t.Errorf("housekeeping first pruned after round %d of %d: want it to prune while the nodes work", firstPruning, paced)
	}
	for _, a := range machines {
		if got, want := f.inventorySection(a.node, proto.SectionGPUs), fmt.Sprintf(`{"round":%d}`, rounds-1); got != want {
			t.Errorf("%s's inventory at the end: %s, want the last it sent, %s", a.node, got, want)
		}
	}
}

// adminWrites has the admin put, list and delete a secret of each tenant in turn and mint
// a join token, over and over until quiet is closed, and returns how many times.
func (f *busyFleet) adminWrites(quiet <-chan struct{}) int64 {
	for i := 0; ; i++ {
		select {
		case <-quiet:
			return int64(i)
		default:
		}
		tenant := busyTenants[i%len(busyTenants)]
		ref := fmt.Sprintf("secret://other/%d", i)
		_, err := call[api.PutSecret](f.admin, "secrets.put", api.PutSecretRequest{TenantID: tenant, Ref: ref, Value: []byte("other")})
		f.must(err, "secrets.put")
		_, err = call[api.SecretList](f.admin, "secrets.list", api.ListSecretsRequest{TenantID: tenant})
		f.must(err, "secrets.list")
		_, err = call[api.DeletedSecret](f.admin, "secrets.delete", api.SecretRequest{TenantID: tenant, Ref: ref})
		f.must(err, "secrets.delete")
		f.mint(store.TokenProvisioned, fmt.Sprintf("later-%d", i))
	}
}

// The command agentsAsk leaves pending for a node whose agent never comes.
const parkedNode, parkedCommand = "parked-node", "parked"

// retention is what agentsAsk checks the housekeeping's pruning against: the events of
// each node of the fleet, those of its enrollment and those written since, and the last
// generation its agent acknowledged.
type retention struct {
	f, by    *busyFleet
	tenantOf map[string]string

	mu     sync.Mutex
	events map[string][]store.Event
	// acked is the generation each node's agent was last seen to have acknowledged.
	acked map[string]int64
	// parkedAt is when the parked command was relayed.
	parkedAt time.Time
}

// newRetention is the retention of machines, whose events so far (their enrollments')
// it reads from the store.
func newRetention(f, by *busyFleet, machines []*fleetAgent, tenantOf map[string]string) *retention {
	r := &retention{f: f, by: by, tenantOf: tenantOf, events: map[string][]store.Event{}, acked: map[string]int64{}}
	err := by.r.st.View(func(tx *store.Tx) error {
		for _, a := range machines {
			events, _, err := tx.Events(a.node, "", store.Page{})
			if err != nil {
				return err
			}
			r.events[a.node] = events
		}
		return nil
	})
	f.must(err, "reading the events")
	return r
}

// event writes an event of node, the end of step, as its workflows do, and keeps it.
func (r *retention) event(node, step string) {
	var e store.Event
	err := r.by.r.st.Update(func(tx *store.Tx) (err error) {
		e, err = tx.AppendEvent(store.Event{Node: node, Tenant: r.tenantOf[node], Kind: store.EventStepEnded, Step: step, To: store.StepSucceeded})
		return err
	})
	if r.f.must(err, "appending an event") {
		r.mu.Lock()
		r.events[node] = append(r.events[node], e)
		r.mu.Unlock()
	}
}

// check checks the store just after each registry's housekeeping pruned at now or
// later: no join token expired more than its retention ago and no event older than
// theirs is left, and every younger token the admin minted and event the fleet wrote
// is; each node, its NodeSpec, its agents' joins, its enrollment's runs and the
// generation its agent acknowledged stay, and so does the pending command until it is
// agents.CommandTTL old, not after. It returns
// how many of the tokens and events it knows of are gone.
func (r *retention) check(now time.Time) (gone int) {
	t := r.f.t
	tokenCutoff, eventCutoff := now.Add(-regjoin.Retention), now.Add(-store.EventMaxAge)
	// What was written is taken before the store is read: all of it is in the store
	// unless pruned.
	var minted []api.Token
	for _, fl := range []*busyFleet{r.f, r.by} {
		fl.minted.Range(func(_, v any) bool { minted = append(minted, v.(api.Token)); return true })
	}
	r.mu.Lock()
	written := map[string][]store.Event{}
	for node, events := range r.events {
		written[node] = slices.Clone(events)
	}
	r.mu.Unlock()
	err := r.by.r.st.View(func(tx *store.Tx) error {
		stored := map[string]bool{}
		for p := (store.Page{}); ; {
			tokens, next, err := tx.JoinTokens(p)
			if err != nil {
				return err
			}
			for _, tok := range tokens {
				stored[tok.ID] = true
				if tok.ExpiresAt.Before(tokenCutoff) {
					t.Errorf("at %s, join token %s (expired %s) is kept past its retention", now, tok.ID, tok.ExpiresAt)
				}
			}
			if p.Cursor = next; next == "" {
				break
			}
		}
		for _, tok := range minted {
			switch {
			case stored[tok.ID]:
			case tok.ExpiresAt.Before(tokenCutoff):
				gone++
			default:
				t.Errorf("at %s, join token %s (expires %s, used %v) was pruned within its retention", now, tok.ID, tok.ExpiresAt, !tok.UsedAt.IsZero())
			}
		}
		for node, events := range written {
			gone += r.checkNode(tx, now, eventCutoff, node, events)
		}
		_, err := tx.AgentCommand(parkedNode, parkedCommand)
		switch expired := r.parkedAt.Before(now.Add(-agents.CommandTTL)); {
		case expired && err == nil:
			t.Errorf("at %s, the command of %s nobody collected (relayed %s) is kept past %s", now, parkedNode, r.parkedAt, agents.CommandTTL)
		case !expired && err != nil:
			t.Errorf("at %s, the pending command of %s (relayed %s): %v", now, parkedNode, r.parkedAt, err)
		}
		return nil
	})
	r.f.must(err, "reading the store")
	return gone
}

// checkNode is check's part of one node, whose events written are: it returns how many
// of those are gone.
func (r *retention) checkNode(tx *store.Tx, now, cutoff time.Time, node string, written []store.Event) (gone int) {
	t := r.f.t
	stored, _, err := tx.Events(node, "", store.Page{})
	if err != nil {
		t.Errorf("%s's events: %v", node, err)
	}
	seqs := map[uint64]bool{}
	for _, e := range stored {
		seqs[e.Seq] = true
		if e.At.Before(cutoff) {
			t.Errorf("at %s, event %d of %s (at %s) is kept past its retention", now, e.Seq, node, e.At)
		}
	}
	runs := map[string]bool{}
	for _, e := range written {
		switch {
		case seqs[e.Seq]:
		case e.At.Before(cutoff):
			gone++
		default:
			t.Errorf("at %s, event %d of %s (%s at %s) was pruned within its retention", now, e.Seq, node, e.Kind, e.At)
		}
		if e.Workflow != "" {
			runs[e.Workflow] = true
		}
	}
	for id := range runs {
		if _, err := tx.Run(id); err != nil {
			t.Errorf("at %s, run %s of %s: %v", now, id, node, err)
		}
	}
	if _, err := tx.Node(node); err != nil {
		t.Errorf("at %s, node %s: %v", now, node, err)
	}
	if _, err := tx.NodeSpec(node); err != nil {
		t.Errorf("at %s, the NodeSpec of %s: %v", now, node, err)
	}
	if joins, err := tx.AgentJoins(node); err != nil || len(joins) == 0 {
		t.Errorf("at %s, the joins of %s's agents: %v, %v", now, node, joins, err)
	}
	st, err := tx.AgentStatus(node)
	if err != nil && proto.CodeOf(err) != proto.NotFound {
		t.Errorf("at %s, the agent status of %s: %v", now, node, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if st.ObservedGeneration < r.acked[node] {
		t.Errorf("at %s, %s's agent is recorded at generation %d, after it acknowledged %d", now, node, st.ObservedGeneration, r.acked[node])
	}
	r.acked[node] = st.ObservedGeneration
	return gone
}

// ownSecret is the secret only node's NodeSpec names.
func ownSecret(node string) string { return "secret://k8s/" + node }

// hostSpec stores a NodeSpec of node whose host section has a k8s-join naming each of
// refs, its labels the round.
func (f *busyFleet) hostSpec(node string, round int, refs ...string) error {
	var host []proto.HostUnit
	for _, ref := range refs {
		host = append(host, proto.HostUnit{Unit: "k8s-join", Settings: json.RawMessage(`{"server": "https://10.0.0.1:6443", "caCertSha256": "` +
			strings.Repeat("ab", 32) + `", "tokenRef": "` + ref + `"}`)})
	}
	return f.r.st.Update(func(tx *store.Tx) error {
		_, err := tx.SetNodeSpec(proto.NodeSpec{Node: node, Role: proto.RoleNode, Labels: map[string]string{"round": fmt.Sprint(round)}, Host: host})
		return err
	})
}

// secretNamed puts a secret of n's tenant at ref and stores a NodeSpec of n naming it
// (hostSpec, round 0): what an installed OS's agent asks for, and must stop getting.
func (f *busyFleet) secretNamed(n store.Node, ref string) {
	_, err := call[api.PutSecret](f.admin, "secrets.put", api.PutSecretRequest{TenantID: n.Tenant, Ref: ref, Value: []byte("join-token")})
	f.must(err, "secrets.put")
	f.must(f.hostSpec(n.ID, 0, ref), "storing a NodeSpec")
}

// inventorySection is the data the store holds for node's inventory section.
func (f *busyFleet) inventorySection(node, section string) (data string) {
	err := f.r.st.View(func(tx *store.Tx) error {
		sections, err := tx.Inventory(node)
		for _, s := range sections {
			if s.Section == section {
				data = string(s.Data)
			}
		}
		return err
	})
	f.must(err, "reading the inventory")
	return data
}

// dcgmInput is a diag.dcgm command's input as the fleet's agents read it: the command's
// id, which a forged result needs, and whether to forge it.
type dcgmInput struct {
	proto.DiagDCGM
	ID    string `json:"id"`
	Forge bool   `json:"forge,omitempty"`
}

// dcgm is the agent's diag.dcgm: a passed level-1 run, node-signed, or, when the
// command says forge, signed with the key of the neighbour's certificate and claiming
// to be the agent's.
func (a *fleetAgent) dcgm(neighbour string, key tls.Certificate) session.Handler {
	return func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
		var in dcgmInput
		if err := json.Unmarshal(p, &in); err != nil {
			return nil, err
		}
		result := proto.DCGMResult{Level: 1, GPUs: 1, Tests: []proto.DCGMTest{{Name: "memory", Status: proto.DCGMPass,
			Results: []proto.DCGMEntityResult{{Entity: "GPU", ID: 0, Status: proto.DCGMPass}}}}, Passed: true}
		if !in.Forge {
			return session.SignResult(ctx, proto.CommandDiagDCGM, result)
		}
		body, err := json.Marshal(result)
		if err != nil {
			return nil, err
		}
		sr, err := proto.SignResult(key.PrivateKey.(crypto.Signer), proto.ResultPayload{NodeID: a.node, CommandID: in.ID, Kind: proto.CommandDiagDCGM, Result: body})
		if err != nil {
			return nil, fmt.Errorf("signing as %s: %w", neighbour, err)
		}
		sr.Certificate = key.Certificate[0]
		return json.Marshal(sr)
	}
}

// dcgm relays a diag.dcgm command id to node's agent: its node-signed result is taken,
// or, when forge has it signed with another node's key, refused (DRIVER_ERROR,
// signature).
func (f *busyFleet) dcgm(ctx context.Context, node, id string, forge bool) {
	payload, err := json.Marshal(dcgmInput{DiagDCGM: proto.DiagDCGM{Level: 1}, ID: id, Forge: forge})
	f.must(err, "a diag.dcgm input")
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got, err := f.r.plane.ep.Relay(rctx, node, proto.RoleNode, proto.Command{ID: id, Kind: proto.CommandDiagDCGM, Payload: payload})
	switch {
	case !forge && err != nil:
		f.t.Errorf("diag.dcgm %s, signed by %s: %v", id, node, err)
	case forge && (err == nil || proto.CodeOf(err) != proto.DriverError || proto.AsError(err).Details.Reason != proto.ReasonSignature):
		f.t.Errorf("diag.dcgm %s, signed by another node's key: %s, %v; want DRIVER_ERROR %s", id, got, err, proto.ReasonSignature)
	}
}

// TestConsoleLivePagesEndOnClose: the console's live pages of nodes whose workflows run
// (their server-sent event streams, each following its run and its node's events
// through the API), opened by each tenant's browser while the tenants' clients call,
// end when the registry closes, rather than holding Close up or reading a released
// store, and no goroutine of the registry, the console's included, is left.
func TestConsoleLivePagesEndOnClose(t *testing.T) {
	f := startBusyFleet(t)
	// No site agent answers: each enrollment's workflow waits at its first BMC read.
	type stream struct {
		tenant, node string
		ended        chan error
	}
	var streams []stream
	for ti, tenant := range busyTenants {
		browser := f.signIn(f.configs[tenant])
		for i := range 2 {
			node, err := call[api.Node](f.tenants[tenant], "metal.enroll", api.EnrollRequest{Pool: "gpu", MACs: []string{fmt.Sprintf("52:54:00:00:%02x:%02x", ti, i)},
				BMC: api.BMC{Driver: "redfish", Address: fmt.Sprintf("https://10.0.0.%d", 10*ti+i+1)}})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // a page open twice
				streams = append(streams, stream{tenant, node.ID, f.openLive(browser, node.ID)})
			}
		}
	}
	// The tenants' clients call meanwhile.
	stop := make(chan struct{})
	var callers sync.WaitGroup
	for _, tenant := range busyTenants {
		callers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := call[api.NodeList](f.tenants[tenant], "metal.list", api.ListNodesRequest{}); err != nil {
					return // the registry closed
				}
			}
		})
	}
	f.wait("every live page follows its node", func() bool {
		return strings.Count(strings.Join(runningRegistry(), "\n"), "console.(*Console).follow(") >= 2*len(streams)
	})
	if err := f.r.Close(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	callers.Wait()
	for _, s := range streams {
		select {
		case err := <-s.ended:
			if err != nil {
				t.Errorf("%s's live page of %s: %v", s.tenant, s.node, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s's live page of %s goes on after Close", s.tenant, s.node)
		}
	}
	for _, g := range registryGoroutines() {
		t.Errorf("a goroutine of the registry left after Close:\n%s", g)
	}
}

// signIn signs in to the console with cfg's credential as a browser does (the sign-in
// page's token, then the form from the console's own origin) and returns the browser.
func (f *busyFleet) signIn(cfg api.ClientConfig) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(cfg.ServingCA))
	jar, err := cookiejar.New(nil)
	f.must(err, "a cookie jar")
	browser := &http.Client{Jar: jar, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	f.t.Cleanup(browser.CloseIdleConnections)
	base := f.r.Info().URL
	resp, err := browser.Get(base + "/ui/signin")
	if err != nil {
		f.t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	if m == nil {
		f.t.Fatalf("the sign-in page holds no form token:\n%s", page)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/ui/signin", strings.NewReader(url.Values{"credential": {cfg.Credential}, "csrf": {string(m[1])}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	if resp, err = browser.Do(req); err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		f.t.Fatalf("signing in to the console: %s", resp.Status)
	}
	return browser
}

// openLive opens node's live page in browser and reads its first update; the channel
// gets nil when the stream ends after that, or what went wrong.
func (f *busyFleet) openLive(browser *http.Client, node string) chan error {
	ended := make(chan error, 1)
	resp, err := browser.Get(f.r.Info().URL + "/ui/nodes/" + node + "/live")
	if err != nil {
		f.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		f.t.Fatalf("the live page of %s: %s %s", node, resp.Status, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() && lines.Text() != "event: update" {
	}
	if lines.Err() != nil {
		f.t.Fatalf("the live page of %s: %v", node, lines.Err())
	}
	go func() {
		defer resp.Body.Close()
		for lines.Scan() {
		}
		// A stream the registry ends mid-way reads as cut; one it ends cleanly, EOF.
		if err := lines.Err(); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			ended <- err
			return
		}
		ended <- nil
	}()
	return ended
}

// busyAttest is the profile the tenants deploy in TestBusyMeasuredBoot: three
// measured-boot attestations of the machine, one after the other.
const busyAttest = `{"id": "attest", "version": 1, "target": "metal",
  "steps": [{"use": "attest.boot"}, {"use": "attest.boot"}, {"use": "attest.boot"}]}`

// TestBusyMeasuredBoot drives measured boot on a busy registry: the pools' policy is tofu,
// and two machines of each tenant, each a software TPM that booted a kernel of its own
// and whose ramdisk agent answers tpm.enroll, tpm.activate and tpm.quote with it, deploy a
// profile of three attest.boot steps at once, while the admin writes secrets and mints
// tokens, the tenants list what they have, and each tenant asks for, and to accept, the
// boots of the other's nodes over and over. Each node is enrolled with its own TPM's EK,
// is asked to quote with its own AK only, and is recorded with its own boot: a baseline,
// then two matches. One machine's ramdisk answers its second quote with a quote its
// neighbour's TPM made with the neighbour's AK over the registry's nonce: the step fails
// (DRIVER_ERROR, reason quote) and neither node's record changes. That machine then boots
// another kernel: the retried step records a mismatch (reason measurement-mismatch) and
// the node fails until its tenant accepts the boot, and the run, retried again, ends
// with matches of the new baseline. The other tenant gets NOT_FOUND each time it asks,
// and changes nothing.
func TestBusyMeasuredBoot(t *testing.T) {
	f := startBusyFleet(t)
	ctx, cancel := context.WithCancel(context.Background())
	var agents sync.WaitGroup
	defer func() { cancel(); agents.Wait() }()
	siteAgent := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	agents.Go(func() { siteAgent.run(ctx, siteAgent.start()) })
	for _, tenant := range busyTenants {
		c := f.tenants[tenant]
		f.must(c.Call(ctx, "pools.update", api.UpdatePoolRequest{Name: "gpu", Policy: &api.PoolPolicy{HardwareProfile: "gpu-redfish",
			MeasuredBoot: &api.MeasuredBootPolicy{Mode: proto.MeasuredBootTOFU}}}, nil), "pools.update")
		f.must(c.Call(ctx, "profiles.create", api.CreateProfileRequest{Document: api.Document(busyAttest)}, nil), "profiles.create")
	}

	// The machines, each with its TPM; its ramdisk joins once a deploy (or a retry)
	// started, as the one that workflow boots does, of the installation it starts.
	var (
		mu       sync.Mutex
		machines []*tpmMachine
		enrolled sync.WaitGroup
	)
	for ti, tenant := range busyTenants {
		for i := range 2 {
			enrolled.Go(func() {
				node, ok := f.enrollReady(f.tenants[tenant], ti, i)
				if !ok {
					return
				}
				m := &tpmMachine{t: t, node: node.ID, tenant: tenant, kernel: "kernel of " + node.ID, enrolled: make(chan struct{})}
				mu.Lock()
				defer mu.Unlock()
				machines = append(machines, m)
			})
		}
	}
	enrolled.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// The TPMs start here, where t.Fatal may be called; the first machine forges its
	// second quote with the second's TPM.
	for _, m := range machines {
		m.boot(t)
	}
	forger, neighbour := machines[0], machines[1]
	forger.mu.Lock()
	forger.forgeWith, forger.forgeAt = neighbour, 2
	forger.mu.Unlock()

	// From now on: the admin's writes, the tenants' lists, and each tenant's calls on
	// the other's nodes.
	quiet := make(chan struct{})
	var background sync.WaitGroup
	stopBackground := sync.OnceFunc(func() { close(quiet); background.Wait() })
	defer stopBackground()
	background.Go(func() { f.adminWrites(quiet) })
	for i := range 2 {
		background.Go(func() { f.listOwn(busyTenants[i], busyTenants[1-i]) })
	}
	background.Go(func() {
		// A first pass whatever happens, so that each node is asked of.
		for pass := 0; ; pass++ {
			for _, m := range machines {
				select {
				case <-quiet:
					if pass > 0 {
						return
					}
				default:
				}
				f.strangerAttestation(m)
			}
		}
	})

	// Each machine deploys the three attestations at once.
	runs := map[string]string{}
	var deploys sync.WaitGroup
	for _, m := range machines {
		started, err := call[api.DeployStarted](f.tenants[m.tenant], "metal.deploy", api.DeployRequest{NodeID: m.node, ProfileID: "attest"})
		if !f.must(err, "metal.deploy") {
			continue
		}
		runs[m.node] = started.WorkflowID
		m.bootRamdisk(ctx, f, &agents)
		deploys.Go(func() {
			wf := f.runEnded(m, started.WorkflowID)
			if m == forger {
				f.attestFailed(wf, "steps[1]", proto.ReasonQuote)
				f.checkBoot(m, proto.VerdictBaseline)
				return
			}
			f.attestVerdicts(m, wf, proto.VerdictBaseline, proto.VerdictMatch, proto.VerdictMatch)
			f.checkBoot(m, proto.VerdictMatch)
		})
	}
	deploys.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// The forger boots another kernel: retried, its run's first step records the
	// mismatch and fails; accepted by its tenant and retried again, the run ends with
	// matches.
	forger.reboot(t, "another kernel of "+forger.node)
	c := f.tenants[forger.tenant]
	for _, want := range []string{proto.VerdictMismatch, proto.VerdictMatch} {
		retried, err := call[api.TransitionStarted](c, "metal.retry", api.TransitionRequest{NodeID: forger.node})
		if !f.must(err, "metal.retry") {
			break
		}
		forger.bootRamdisk(ctx, f, &agents)
		wf := f.runEnded(forger, retried.WorkflowID)
		if want == proto.VerdictMismatch {
			f.attestFailed(wf, "steps[0]", proto.ReasonMeasurementMismatch)
			seen := f.checkBoot(forger, proto.VerdictMismatch)
			accepted, err := call[api.NodeAttestation](c, "metal.acceptBoot", api.AcceptBootRequest{NodeID: forger.node, Boot: seen})
			if f.must(err, "metal.acceptBoot") && (accepted.Baseline == nil || !forger.ownPCRs(accepted.Baseline.PCRs)) {
				t.Errorf("%s's accepted baseline %+v is not its boot of %q", forger.node, accepted.Baseline, forger.kernel)
			}
			continue
		}
		f.attestVerdicts(forger, wf, proto.VerdictMatch, proto.VerdictMatch, proto.VerdictMatch)
		f.checkBoot(forger, proto.VerdictMatch)
	}
	stopBackground()
	for _, m := range machines {
		m.checkAsked()
	}
}

// tpmMachine is a machine of TestBusyMeasuredBoot: its software TPM, which booted
// kernel, and the handlers of its ramdisk agent, which answer measured boot's commands
// with it.
type tpmMachine struct {
	t                    *testing.T
	node, tenant, kernel string
	sw                   *tpmboot.SWTPM

	mu  sync.Mutex
	tpm *tpm.TPM
	// ek and ak are the TPM's enrollment's; enrolled is closed once it is made.
	ek, ak   []byte
	enrolled chan struct{}
	// quotes counts the quotes asked of it; the quote forgeAt is made by forgeWith's
	// TPM, with its AK.
	quotes    int
	forgeAt   int
	forgeWith *tpmMachine
	// strangers counts the other tenant's calls on the node, all refused.
	strangers atomic.Int64
	// stopRamdisk stops the agent of the ramdisk booted last.
	stopRamdisk context.CancelFunc
	// held are the commands whose handlers its ramdisks hold until released, by kind.
	held map[string]*heldCommand
}

// bootRamdisk boots the machine's ramdisk again: its agent joins with a new token, so
// its certificate is of the installation the deploy or retry just started, and takes
// over from the one booted before, whose certificate is of an earlier installation.
func (m *tpmMachine) bootRamdisk(ctx context.Context, f *busyFleet, agents *sync.WaitGroup) {
	a := f.newAgent(m.node, f.raceJoin(store.TokenRamdisk, m.node, "ramdisk"))
	a.handlers = m.handlers()
	for kind, h := range m.held {
		a.handlers[kind] = h.wrap(a.handlers[kind])
	}
	actx, stop := context.WithCancel(ctx)
	m.mu.Lock()
	if m.stopRamdisk != nil {
		m.stopRamdisk()
	}
	m.stopRamdisk = stop
	m.mu.Unlock()
	agents.Go(func() { a.run(actx, a.start()) })
}

// handlers answer tpm.enroll, tpm.activate and tpm.quote as bcd ramdisk does, with the
// machine's TPM (or, for its quote forgeAt, with another's).
func (m *tpmMachine) handlers() map[string]session.Handler {
	return map[string]session.Handler{
		proto.CommandTPMEnroll: tpmAnswer(func(_ context.Context, _ struct{}) (proto.TPMEnrollResult, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			e, err := m.tpm.Enroll()
			if err == nil && m.ek != nil {
				m.t.Errorf("%s's TPM is enrolled a second time", m.node)
			} else if err == nil {
				m.ek, m.ak = e.EKPublic, e.AKBlob
				close(m.enrolled)
			}
			return e, err
		}),
		proto.CommandTPMActivate: tpmAnswer(func(_ context.Context, in proto.TPMActivate) (proto.TPMActivateResult, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.tpm.Activate(in)
		}),
		proto.CommandTPMQuote: tpmAnswer(func(ctx context.Context, in proto.TPMQuote) (proto.TPMQuoteResult, error) {
			m.mu.Lock()
			m.quotes++
			own, other := m.ak, m.forgeWith
			if m.quotes != m.forgeAt {
				other = nil
			}
			m.mu.Unlock()
			if !bytes.Equal(in.AKBlob, own) {
				m.t.Errorf("%s's ramdisk is asked to quote with an AK that is not its TPM's", m.node)
			}
			by := m
			if other != nil {
				select {
				case <-other.enrolled:
				case <-ctx.Done():
					return proto.TPMQuoteResult{}, ctx.Err()
				}
				by = other
				by.mu.Lock()
				in.AKBlob = by.ak
				by.mu.Unlock()
			}
			by.mu.Lock()
			defer by.mu.Unlock()
			return by.tpm.Quote(in)
		}),
	}
}

// tpmAnswer is a handler that decodes its input into I and answers with do's result.
func tpmAnswer[I, O any](do func(context.Context, I) (O, error)) session.Handler {
	return func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
		var in I
		if err := json.Unmarshal(p, &in); err != nil {
			return nil, err
		}
		out, err := do(ctx, in)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}
}

// boot starts the machine's TPM, which boots its kernel.
func (m *tpmMachine) boot(t *testing.T) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tpm, m.sw = tpmboot.Machine(t, tpmboot.Boot(m.kernel), nil)
}

// reboot boots the machine again, with kernel.
func (m *tpmMachine) reboot(t *testing.T, kernel string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tpm.Close()
	m.tpm, m.kernel = tpmboot.Reboot(t, m.sw, tpmboot.Boot(kernel), nil), kernel
}

// ownPCRs says whether pcrs are each the value the machine's boot of its kernel gave,
// replayed from the boot's events.
func (m *tpmMachine) ownPCRs(pcrs []api.PCR) bool {
	m.mu.Lock()
	kernel := m.kernel
	m.mu.Unlock()
	want := map[int][sha256.Size]byte{}
	for _, e := range tpmboot.Boot(kernel) {
		pcr := want[e.PCR]
		want[e.PCR] = sha256.Sum256(append(pcr[:], e.Sum()...))
	}
	for _, p := range pcrs {
		if d := want[p.Index]; p.SHA256 != hex.EncodeToString(d[:]) {
			return false
		}
	}
	return len(pcrs) > 0
}

// checkAsked checks, at the end, that the machine's TPM was enrolled and quoted, and that
// the other tenant asked of its node.
func (m *tpmMachine) checkAsked() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ek == nil || m.quotes == 0 || m.strangers.Load() == 0 {
		m.t.Errorf("%s: enrolled %v, quoted %d times, the other tenant's calls %d", m.node, m.ek != nil, m.quotes, m.strangers.Load())
	}
}

// runEnded waits for the run id of m's node to end, and returns it.
func (f *busyFleet) runEnded(m *tpmMachine, id string) (wf api.WorkflowView) {
	f.wait("the run "+id+" of "+m.node+" ends", func() bool {
		var err error
		wf, err = call[api.WorkflowView](f.tenants[m.tenant], "workflows.get", api.GetWorkflowRequest{ID: id})
		return err == nil && (wf.State == store.RunSucceeded || wf.State == store.RunFailed)
	})
	return wf
}

// attestVerdicts checks that the run wf succeeded with its attest.boot steps' verdicts
// want, each of m's own boot.
func (f *busyFleet) attestVerdicts(m *tpmMachine, wf api.WorkflowView, want ...string) {
	var got []string
	for _, s := range wf.Steps {
		var res proto.AttestBootResult
		if s.Use != proto.StepAttestBoot || json.Unmarshal(s.Result, &res) != nil {
			continue
		}
		got = append(got, res.Verdict)
		var pcrs []api.PCR
		for _, p := range res.Boot.PCRs {
			pcrs = append(pcrs, api.PCR{Index: p.Index, SHA256: hex.EncodeToString(p.Digest)})
		}
		if !m.ownPCRs(pcrs) {
			f.t.Errorf("%s's %s verified PCRs %+v: not its own boot of %q", m.node, s.Path(), pcrs, m.kernel)
		}
	}
	if wf.State != store.RunSucceeded || !slices.Equal(got, want) {
		f.t.Errorf("%s's run %s: %s, verdicts %v, want succeeded with %v (failure %+v)", m.node, wf.ID, wf.State, got, want, wf.Failure)
	}
}

// attestFailed checks that the run wf failed at step with DRIVER_ERROR and reason.
func (f *busyFleet) attestFailed(wf api.WorkflowView, step, reason string) {
	if e := wf.Failure; wf.State != store.RunFailed || e == nil || e.Step != step || e.Error.Code != proto.DriverError || e.Error.Details.Reason != reason {
		f.t.Errorf("run %s of %s: %s, failure %+v; want it failed at %s with DRIVER_ERROR %s", wf.ID, wf.NodeID, wf.State, e, step, reason)
	}
}

// checkBoot checks that m's tenant reads m's node enrolled with its TPM's EK, and its
// last boot verified its own, with verdict.
func (f *busyFleet) checkBoot(m *tpmMachine, verdict string) (digest string) {
	got, err := call[api.NodeAttestation](f.tenants[m.tenant], "metal.attestation", api.NodeKey{NodeID: m.node})
	if !f.must(err, "metal.attestation") {
		return ""
	}
	m.mu.Lock()
	ek := sha256.Sum256(m.ek)
	m.mu.Unlock()
	if !got.Enrolled || got.EKSHA256 != hex.EncodeToString(ek[:]) || got.LastBoot == nil || got.LastBoot.Verdict != verdict || !m.ownPCRs(got.LastBoot.PCRs) {
		f.t.Errorf("%s's attestation %+v: want enrolled with its TPM's EK, its last boot its own of %q, verdict %s", m.node, got, m.kernel, verdict)
		return ""
	}
	return got.LastBoot.Digest
}

// strangerAttestation has the tenant that is not m's ask for m's node's attestation, and
// to accept its last boot, named as m's tenant sees it: NOT_FOUND both, and the node's attestation is as before.
func (f *busyFleet) strangerAttestation(m *tpmMachine) {
	other := busyTenants[0]
	if other == m.tenant {
		other = busyTenants[1]
	}
	// The stranger names the node's last boot as its tenant sees it, once there is one.
	boot := "sha256:" + strings.Repeat("0", 64)
	if own, err := call[api.NodeAttestation](f.tenants[m.tenant], "metal.attestation", api.NodeKey{NodeID: m.node}); f.must(err, "metal.attestation") && own.LastBoot != nil {
		boot = own.LastBoot.Digest
	}
	for method, req := range map[string]any{"metal.attestation": api.NodeKey{NodeID: m.node},
		"metal.acceptBoot": api.AcceptBootRequest{NodeID: m.node, Boot: boot}} {
		got, err := call[api.NodeAttestation](f.tenants[other], method, req)
		if proto.CodeOf(err) != proto.NotFound || got.Enrolled || got.LastBoot != nil || got.Baseline != nil {
			f.t.Errorf("%s calls %s on %s's node %s: %+v, %v; want NOT_FOUND", other, method, m.tenant, m.node, got, err)
		}
	}
	after, err := call[api.NodeAttestation](f.tenants[m.tenant], "metal.attestation", api.NodeKey{NodeID: m.node})
	if f.must(err, "metal.attestation") && after.Baseline != nil && after.Baseline.AcceptedBy == f.credentials[other] {
		f.t.Errorf("%s's baseline is accepted by %s's credential", m.node, other)
	}
	m.strangers.Add(1)
}
