// Package registry assembles the central registry from its rooms: the store, the PKI,
// the API and its methods, the workflow engine, and the listeners. `better-compute serve` calls Run;
// tests start several registries in one process with New, Serve and Close.
package registry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/console"
	"github.com/better-compute/better-compute/registry/join"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/userdata"
	"github.com/better-compute/better-compute/registry/workflow"
)

// AdminConfig is the name of the admin's CLI config in the data directory.
const AdminConfig = "admin.conf"

// HardwareProfilesFile is the hardware profiles file read from the data directory when
// serve is given none.
const HardwareProfilesFile = "hardware-profiles.json"

// Config is what `serve` is started with.
type Config struct {
	// DataDir holds the store (unless Store names etcd), the PKI, admin.conf and the
	// admin socket.
	DataDir string
	// Store says where the records are: DATA_DIR/registry.db when zero.
	Store StoreConfig
	// Listen is the HTTPS API's address, host:port.
	Listen string
	// AgentListen is the agents' QUIC endpoint, host:port on UDP, as the well-known
	// document and JoinResponses tell agents to dial it.
	AgentListen string
	// AgentEndpoints are the agent endpoints advertised to agents, host:port each: every
	// replica's, the same list on each, so that an agent whose replica is gone connects
	// to another. Empty advertises this registry's own endpoint alone.
	AgentEndpoints []string
	// HardwareProfiles is the hardware profiles file; "" reads
	// DATA_DIR/hardware-profiles.json when it exists.
	HardwareProfiles string
	// AllowUnsignedImages lets a tenant deploy its own unsigned OS images: for
	// development only.
	AllowUnsignedImages bool
	// Log receives the registry's structured logs.
	Log *slog.Logger
	// UserData is what user data is rendered with; its pins default to the registry's
	// own.
	UserData userdata.Config
	// KEKFile, if set, names the key-encryption key file: the registry's keys are then
	// kept sealed with it in the store, shared by every registry on that store, instead
	// of in DATA_DIR/pki. The first start makes the file when it is missing
	// (docs/security.md).
	KEKFile string
	// SecretsKeyLost starts the registry with a secrets key other than the one the
	// store's secrets are sealed with, which is lost: they never open again, and the store
	// records the key from now on (docs/security.md#the-secrets-key). Without it, such a
	// start is refused.
	SecretsKeyLost bool
	// PKILost starts the registry with a PKI (DATA_DIR/pki: its CAs and join keys) other
	// than the one the store's agents joined with and its join tokens were minted for,
	// which is lost: every agent joins again, and the store records the PKI from now on
	// (docs/security.md#the-pki). Without it, such a start is refused.
	PKILost bool
	// MetricsListen is the address /metrics is served on over HTTP, without credential
	// (nothing in it is secret), host:port; "" serves no metrics.
	MetricsListen string
	// APILimits bound the authenticated calls of the HTTPS API: how many run at once,
	// and how many one tenant may have waiting (docs/security.md); zero fields are the
	// defaults.
	APILimits api.Limits
	// TenantBounds bound the secrets, images, profile versions, credentials, pools and
	// nodes each tenant may hold
	// (docs/security.md#what-strangers-can-cost); zero fields are the defaults. Give
	// every replica on one store the same.
	TenantBounds TenantBounds
	// AuthFailures bound the failed credential checks of each source address, for the
	// API, the console's sign-in and join.join's tokens, on Clock (docs/security.md);
	// zero fields are the defaults.
	AuthFailures api.FailureLimits
	// Clock is the registry's one clock: records, certificates, workflow timeouts,
	// command expiry and every periodic task follow it. clock.Real when nil.
	Clock clock.Clock
}

// Info describes a running registry, for the operator; `serve --format json` prints it,
// in the API's camelCase as every other command's JSON.
type Info struct {
	// URL is the API's base URL.
	URL string `json:"url"`
	// AdminConfig is the path of the admin's CLI config.
	AdminConfig string `json:"adminConfig"`
	// FirstStart is true when this start made the root tenant and its admin credential.
	FirstStart bool `json:"firstStart"`
	// AdminConfigStale, when set, says that AdminConfig holds a credential the store
	// refuses (revoked by a rotation on another replica, say) and what to do.
	AdminConfigStale string `json:"adminConfigStale,omitempty"`
	// KEKFile is the key-encryption key file the registry's keys are sealed with, when
	// they are; KEKMade is true when this start made it.
	KEKFile string `json:"kekFile,omitempty"`
	KEKMade bool   `json:"kekMade,omitempty"`
	// AgentEndpoint is the agents' QUIC endpoint as agents on this host dial it.
	AgentEndpoint string `json:"agentEndpoint"`
	// AgentEndpoints are the agent endpoints the registry advertises to agents
	// (Config.AgentEndpoints, else AgentEndpoint).
	AgentEndpoints []string `json:"agentEndpoints"`
	// Pins are what `bcd join` must be given to trust this registry; also in PinsFile.
	Pins     joinwire.Pins `json:"pins"`
	PinsFile string        `json:"pinsFile"`
	// MetricsURL is where Prometheus scrapes the registry's metrics; "" when it serves
	// none.
	MetricsURL string `json:"metricsUrl,omitempty"`
}

// Registry is one registry process's parts: its store, keys, listeners, agent endpoint
// and workflow engine. New opens and listens, Serve serves, Close stops what New and
// Serve started and releases the store; tests start several in one process.
type Registry struct {
	cfg   Config
	info  Info
	st    *store.Store
	keys  keys
	plane *agentPlane
	metal *metal.Service
	// holder is this run of the registry: its replica id and start, whose lease the
	// store holds while it runs (lease.go).
	holder   store.Holder
	ln, sock net.Listener
	sockPath string
	httpsSrv *http.Server
	hostSrv  *http.Server
	// stopMetrics stops the metrics listener (a no-op when there is none).
	stopMetrics func()

	mu sync.Mutex
	// serving is set while Serve runs; stop ends it, done is closed when it returned.
	serving bool
	stop    context.CancelFunc
	done    chan struct{}
	closed  bool
}

// ErrClosed is what Serve returns on a registry Close has closed.
var ErrClosed = errors.New("the registry is closed")

// New opens the store and the registry's keys in cfg.DataDir, makes the root tenant and
// admin.conf on first start, and listens: the HTTPS API, the admin socket and the agent
// endpoint, which accepts agents from now on. Nothing else runs before Serve; Close
// releases what New took, whether Serve ran or not.
func New(cfg Config) (_ *Registry, err error) {
	if err := joinwire.CheckEndpoints(cfg.AgentEndpoints); err != nil {
		return nil, proto.Errorf(proto.InvalidInput, "agent endpoints%v (list host:port,host:port)", err).WithPath("--agent-endpoints")
	}
	if cfg.Store.Backend == "etcd" && cfg.KEKFile == "" {
		return nil, proto.Errorf(proto.InvalidConfig, "a registry on the etcd store needs --kek-file: the replicas sharing the store share the registry's keys sealed in it, and the key-encryption key that opens them is read from that file (copy one file to every replica)").WithPath("--kek-file")
	}
	if err := prepareDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{cfg: cfg, done: make(chan struct{})}
	// Until New succeeds, what it made is released here.
	defer func() {
		if err != nil {
			err = r.outdated(err)
			r.release()
		}
	}()
	if r.st, err = cfg.Store.openStore(cfg.DataDir, store.Options{Now: cfg.Clock.Now, Bounds: cfg.TenantBounds}); err != nil {
		return nil, err
	}
	if r.keys, err = loadKeys(cfg, r.st); err != nil {
		return nil, err
	}
	k := r.keys
	keys, box := k.pki, k.box
	userData, err := newUserData(cfg, keys, box)
	if err != nil {
		return nil, err
	}
	hardware, err := loadHardwareProfiles(cfg)
	if err != nil {
		return nil, err
	}
	if r.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, proto.Errorf(proto.InvalidConfig, "listen on %s: %v (pick another --listen address)", cfg.Listen, err)
	}
	tcp := r.ln.Addr().(*net.TCPAddr)
	r.info = Info{
		URL:         "https://" + clientAddr(tcp.IP, tcp.Port),
		AdminConfig: filepath.Join(cfg.DataDir, AdminConfig),
		Pins:        keys.Pins(),
		PinsFile:    filepath.Join(cfg.DataDir, pki.PinsFile),
	}
	r.info.KEKFile, r.info.KEKMade = cfg.KEKFile, k.kekMade
	adminCfg := api.ClientConfig{Server: r.info.URL, ServingCA: string(keys.ServingCAPEM)}
	if r.info.FirstStart, err = bootstrap(r.st, adminCfg, r.info.AdminConfig); err != nil {
		return nil, err
	}
	if !r.info.FirstStart {
		if r.info.AdminConfigStale = staleAdminConfig(r.st, r.info.AdminConfig, cfg.DataDir); r.info.AdminConfigStale != "" {
			cfg.Log.Warn("the admin config holds a refused credential", "detail", r.info.AdminConfigStale)
		}
	}
	cert, err := newServingCertificate(keys, serverNames(tcp), cfg.Clock.Now, cfg.Log)
	if err != nil {
		return nil, err
	}
	r.sockPath = filepath.Join(cfg.DataDir, api.AdminSocket)
	if r.sock, err = listenAdmin(r.sockPath); err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	replica, err := replicaName(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	r.holder = store.Holder{Replica: replica, Started: cfg.Clock.Now().Round(0)}
	if err := takeLease(r.st, r.holder); err != nil {
		return nil, err
	}
	obs := newMetrics(r.st, func() *agentPlane { return r.plane }, cfg.Log)
	// Assigned even when it fails: release closes what it started.
	if r.plane, err = startAgentPlane(cfg, r.st, k, cert, userData, r.info.URL, r.holder, obs); err != nil {
		return nil, err
	}
	metricsAddr, stopMetrics, err := serveMetrics(cfg.MetricsListen, obs, cfg.Log)
	if err != nil {
		return nil, err
	}
	r.stopMetrics = stopMetrics
	if metricsAddr != nil {
		tcp := metricsAddr.(*net.TCPAddr)
		r.info.MetricsURL = "http://" + clientAddr(tcp.IP, tcp.Port) + "/metrics"
	}
	udp := r.plane.ep.Addr().(*net.UDPAddr)
	r.info.AgentEndpoint = clientAddr(udp.IP, udp.Port)
	r.info.AgentEndpoints = cfg.AgentEndpoints
	if len(r.info.AgentEndpoints) == 0 {
		r.info.AgentEndpoints = []string{r.info.AgentEndpoint}
	}
	joinSvc := join.NewService(r.st, keys, r.info.AgentEndpoints, cfg.Log)
	wellKnown, err := joinSvc.WellKnownHandler()
	if err != nil {
		return nil, err
	}
	engine := r.plane.engine
	r.metal = metal.New(metal.Config{Store: r.st, Engine: engine, Joins: r.plane.joins, HardwareProfiles: hardware,
		Images: catalog{r.st, box.CacheCapabilityKey()}, AllowUnsignedImages: cfg.AllowUnsignedImages, UserData: renderer{userData}, Generations: r.plane.ep,
		Ramdisk: r.plane, Presence: r.plane, Clock: cfg.Clock, Log: cfg.Log})
	joinSvc.OnReuse(r.metal, obs)

	apiSrv := api.NewServer(r.st, cfg.Log)
	apiSrv.Observe(obs)
	apiSrv.Limit(cfg.APILimits)
	apiSrv.LimitFailures(cfg.AuthFailures, cfg.Clock.Now)
	apiSrv.RegisterAll()
	apiSrv.RegisterJoin(recordJoins{joinSvc, r.plane.joins, cfg.Log})
	apiSrv.RegisterUserData(userData)
	apiSrv.RegisterSecrets(box)
	apiSrv.RegisterMetal(r.metal)
	apiSrv.RegisterWorkflows(engine)
	apiSrv.RegisterAdminRotation(api.AdminConfigWriter{Path: r.info.AdminConfig, Write: func(credential string) error {
		c := adminCfg
		c.Credential = credential
		return api.WriteClientConfig(r.info.AdminConfig, c)
	}})
	mux := http.NewServeMux()
	mux.Handle("GET "+joinwire.WellKnownPath, wellKnown)
	mux.Handle("/", apiSrv)
	ui := console.New(console.Config{API: apiSrv, Log: cfg.Log, Now: cfg.Clock.Now})
	mux.Handle(console.Path, ui)
	mux.Handle(console.Root, ui)
	r.httpsSrv = &http.Server{
		Handler:   mux,
		TLSConfig: &tls.Config{GetCertificate: cert.get, MinVersion: tls.VersionTLS13},
		ErrorLog:  slog.NewLogLogger(cfg.Log.Handler(), slog.LevelWarn),
	}
	api.BoundServer(r.httpsSrv)
	r.hostSrv = &http.Server{Handler: apiSrv.HostHandler(), ReadHeaderTimeout: 10 * time.Second}
	for _, srv := range []*http.Server{r.httpsSrv, r.hostSrv} {
		closeUnstartedOnShutdown(srv)
	}
	return r, nil
}

// closeUnstartedOnShutdown makes srv's Shutdown close at once the connections on which no
// request has arrived yet: a client's spare connection, a slow or silent one. Shutdown
// would wait five seconds for each before it counts it idle; nothing on them was
// acknowledged, so a stopping registry (or a replica handing its agents over) stops
// without that wait. A request whose headers have arrived is served to its end.
func closeUnstartedOnShutdown(srv *http.Server) {
	var mu sync.Mutex
	unstarted := map[net.Conn]bool{}
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		if s == http.StateNew {
			unstarted[c] = true
		} else {
			delete(unstarted, c)
		}
	}
	// Shutdown runs this once it has closed the listeners, so no connection joins after.
	srv.RegisterOnShutdown(func() {
		mu.Lock()
		defer mu.Unlock()
		for c := range unstarted {
			c.Close()
		}
	})
}

// Info describes the registry New started.
func (r *Registry) Info() Info { return r.info }

// Serve serves the API and the admin socket, resumes the store's running workflows and
// runs the periodic tasks, until ctx ends or Close is called; it then stops them, and
// the workflows where they are, and returns nil. When another replica raises the
// store's format past what this release reads (store.Store.Outdated), it stops the same
// way and returns why (INVALID_CONFIG), whatever failed first (outdated). It runs once
// per registry.
func (r *Registry) Serve(ctx context.Context) (err error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	if r.serving {
		r.mu.Unlock()
		return errors.New("the registry serves already: Serve runs once")
	}
	ctx, cancel := context.WithCancel(ctx)
	r.serving, r.stop = true, cancel
	r.mu.Unlock()
	defer close(r.done)
	// Whatever failed first, a store another replica outdated says why the replica stops.
	defer func() { err = r.outdated(err) }()
	cfg, engine := r.cfg, r.plane.engine
	stopHousekeeping := startHousekeeping(ctx, cfg.Clock, r.st, cfg.Log)
	stopLease := keepLease(ctx, cfg.Clock, r.st, r.holder, cfg.Log)
	stopRemediation := startRemediation(ctx, cfg.Clock, r.metal, cfg.Log)
	var sites sync.WaitGroup
	sites.Go(func() { r.plane.sites.Run(ctx) })
	// The runs and the periodic tasks stop before Serve returns.
	defer func() {
		cancel()
		stopRemediation()
		sites.Wait()
		engine.Wait()
		stopHousekeeping()
		stopLease()
	}()
	if err := engine.Resume(ctx); err != nil {
		return err
	}
	// Every call's context is Serve's: when Serve stops, the calls that wait (a workflow
	// followed, events awaited, the console's live pages) are answered at once, so none
	// of them runs on once Close has released the store.
	base := func(net.Listener) context.Context { return ctx }
	r.httpsSrv.BaseContext, r.hostSrv.BaseContext = base, base
	errc := make(chan error, 2)
	go func() { errc <- r.httpsSrv.ServeTLS(r.ln, "", "") }()
	go func() { errc <- r.hostSrv.Serve(r.sock) }()
	cfg.Log.Info("registry serving", "url", r.info.URL, "dataDir", cfg.DataDir, "adminSocket", r.sockPath)
	select {
	case <-ctx.Done():
	case err = <-errc:
	case <-r.st.Outdated():
		err = r.st.OutdatedErr()
	}
	cancel()
	shutdown, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	// A connection Shutdown did not end in time is closed: none is served once Serve has
	// returned and Close released the store.
	for _, srv := range []*http.Server{r.httpsSrv, r.hostSrv} {
		if srv.Shutdown(shutdown) != nil {
			srv.Close()
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// outdated is err, failed, or when another replica of a newer release raised the store's
// format past what this one reads (store.Store.Outdated), the store's INVALID_CONFIG
// saying so (logged): this replica cannot read what that release writes, and the store
// refuses its transactions from then on, so whichever of them failed first (resuming the
// runs, taking the lease, or Serve's own watch of the format) the reason to give is the
// format's, and what to do, run the newer release.
func (r *Registry) outdated(err error) error {
	if err == nil || r.st == nil || r.st.OutdatedErr() == nil {
		return err
	}
	format := r.st.OutdatedErr()
	attrs := []any{"err", format, "reads", store.Format}
	if err != format {
		attrs = append(attrs, "failedFirst", err)
	}
	r.cfg.Log.Error("the store's format was raised past what this release reads: stopping; start the newer release here", attrs...)
	return format
}

// Close stops Serve, and waits for it, closes the listeners and the agent endpoint
// (telling each agent when to come back), removes the admin socket and releases the
// store. It may be called more than once, with or without Serve.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	serving, stop := r.serving, r.stop
	r.mu.Unlock()
	if serving {
		stop()
		<-r.done
	}
	return r.release()
}

// release closes what New opened, in the reverse order.
func (r *Registry) release() error {
	if r.stopMetrics != nil {
		r.stopMetrics()
	}
	if r.plane != nil && r.plane.ep != nil {
		r.plane.ep.Close()
	}
	if r.sock != nil {
		r.sock.Close()
		os.Remove(r.sockPath)
	}
	if r.ln != nil {
		r.ln.Close()
	}
	if r.st != nil {
		// An outdated store refuses every write: the lease runs out instead.
		if r.holder.Replica != "" && r.st.OutdatedErr() == nil {
			if err := releaseLease(r.st, r.holder); err != nil {
				r.cfg.Log.Warn("releasing this registry's lease", "err", err)
			}
		}
		return r.st.Close()
	}
	return nil
}

// Run serves the registry until ctx ends (New, then Serve, then Close). ready is called
// once it is listening.
func Run(ctx context.Context, cfg Config, ready func(Info)) error {
	r, err := New(cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	if ready != nil {
		ready(r.Info())
	}
	return r.Serve(ctx)
}

// prepareDataDir makes the data directory, mode 0700, when it does not exist, and refuses
// one that its group or others can enter: it holds the store, the keys, admin.conf and the
// admin socket, which acts as root. What it makes is fsynced in its parent
// (fsutil.MkdirAll): the files written in it fsync only the directory itself, and a power
// loss that lost its name would lose them all.
func prepareDataDir(dir string) error {
	if err := fsutil.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return proto.Errorf(proto.InvalidConfig, "make the data directory's parent: %v", err).WithPath("--data-dir")
	}
	if err := fsutil.MkdirAll(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return proto.Errorf(proto.InvalidConfig, "make the data directory: %v", err).WithPath("--data-dir")
	}
	st, err := os.Stat(dir)
	if err != nil {
		return proto.Errorf(proto.InvalidConfig, "the data directory: %v", err).WithPath("--data-dir")
	}
	if !st.IsDir() {
		return proto.Errorf(proto.InvalidConfig, "the data directory %s is not a directory", dir).WithPath("--data-dir")
	}
	if perm := st.Mode().Perm(); perm&0o011 != 0 {
		return proto.Errorf(proto.InvalidConfig, "the data directory %s has mode %04o, so its group or others can enter it; it holds the registry's keys, its admin credential and the admin socket: run `chmod 700 %s`", dir, perm, dir).WithPath("--data-dir")
	}
	return nil
}

// adminSocketDirs is the pattern of the directories listenAdmin makes the socket in: short,
// since a socket's path must fit in 107 bytes.
const adminSocketDirs = ".a-*"

// listenAdmin listens on the admin socket at path so that no one but this user can
// connect to it at any moment. A socket takes its mode from the umask when it is made, and
// the umask is the whole process's (changing it around Listen would race with every other
// goroutine that makes a file), so the socket is made in a new directory of mode 0700
// beside path, given mode 0600 there, and only then renamed to path: until the rename no
// one else can reach it, after it its mode is 0600. A directory left by a start killed in
// between is removed by the next start.
func listenAdmin(path string) (net.Listener, error) {
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(path), adminSocketDirs))
	for _, dir := range stale {
		os.RemoveAll(dir)
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), adminSocketDirs)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	made := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", made)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // Run removes path when it stops
	if err := os.Chmod(made, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.Rename(made, path); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// newUserData makes the user-data renderer over the secret store; pins left out of the
// configuration are the registry's own.
func newUserData(cfg Config, keys *pki.PKI, box *secret.Box) (*userdata.Renderer, error) {
	udCfg := cfg.UserData
	if udCfg.Pins == nil {
		pins := keys.Pins()
		udCfg.Pins = &pins
	}
	return userdata.New(udCfg, box)
}

// loadHardwareProfiles reads the hardware profiles file the config names, else
// DATA_DIR/hardware-profiles.json when it exists, else knows none.
func loadHardwareProfiles(cfg Config) (metal.HardwareProfiles, error) {
	path := cfg.HardwareProfiles
	if path == "" {
		path = filepath.Join(cfg.DataDir, HardwareProfilesFile)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return metal.HardwareProfiles{}, nil
		}
	}
	return metal.LoadHardwareProfiles(path)
}

// recordJoins tells the workflows' join log of every join the JoinService admits.
type recordJoins struct {
	api.Joiner
	joins *workflow.JoinLog
	log   *slog.Logger
}

func (r recordJoins) Join(ctx context.Context, from string, req joinwire.Request) (joinwire.Response, error) {
	resp, err := r.Joiner.Join(ctx, from, req)
	if err == nil {
		if err := r.joins.Admitted(req.NodeID, req.Role); err != nil {
			r.log.Error("recording a join", "node", req.NodeID, "role", req.Role, "err", err)
		}
	}
	return resp, err
}

// bootstrap makes the root tenant and the admin credential on first start, writing
// the admin config at path (cfg with the credential) before the transaction commits: a
// crash in between leaves no root tenant, so the next start does it again. On later
// starts it refreshes the file's server URL and CA, keeping its credential, whatever
// the store says of it: a start never makes, renews or revokes an admin credential
// (credentials.rotateAdmin does, on the host's command).
func bootstrap(st *store.Store, cfg api.ClientConfig, path string) (first bool, err error) {
	err = st.Update(func(tx *store.Tx) error {
		_, err := tx.Tenant(store.RootTenant)
		if proto.CodeOf(err) != proto.NotFound {
			return err
		}
		first = true
		if _, err := tx.CreateTenant(store.RootTenant); err != nil {
			return err
		}
		_, cfg.Credential, err = tx.CreateCredential(store.RootTenant, []string{api.ActionAll}, time.Time{})
		if err != nil {
			return err
		}
		return api.WriteClientConfig(path, cfg)
	})
	if err != nil || first {
		return first, err
	}
	old, err := api.LoadClientConfig(path)
	if err != nil {
		// The admin removed or replaced it; the credential cannot be recovered from the
		// store, and that is their call (`credentials rotate-admin` makes a new one).
		return false, nil
	}
	if old.Server == cfg.Server && old.ServingCA == cfg.ServingCA {
		return false, nil
	}
	cfg.Credential = old.Credential
	return false, api.WriteClientConfig(path, cfg)
}

// staleAdminConfig says what to do when the admin config at path holds a credential the
// store refuses, as a replica's copy does once the admin credential was rotated through
// another replica; "" when it works, or when there is no readable file to judge.
func staleAdminConfig(st *store.Store, path, dataDir string) string {
	cfg, err := api.LoadClientConfig(path)
	if err != nil {
		return ""
	}
	err = st.View(func(tx *store.Tx) error { _, err := tx.Authenticate(cfg.Credential); return err })
	if proto.CodeOf(err) != proto.Unauthenticated {
		return ""
	}
	return fmt.Sprintf("%s holds an admin credential the store refuses (%s): if the admin credential was rotated through another registry on this store, "+
		"copy that registry's admin.conf here (mode 0600); else make a new one with `better-compute credentials rotate-admin --data-dir %s`",
		path, proto.AsError(err).Message, dataDir)
}

// clientAddr is the address a client on this host dials: a wildcard listen address
// becomes loopback.
func clientAddr(ip net.IP, port int) string {
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(port))
}

// serverNames are the names the server certificate is valid for.
func serverNames(a *net.TCPAddr) []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil {
		names = append(names, h)
	}
	if a.IP != nil && !a.IP.IsUnspecified() {
		names = append(names, a.IP.String())
	}
	return names
}
