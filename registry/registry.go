// Package registry assembles the central registry from its rooms: the store, the PKI,
// the API and its methods, the workflow engine, and the listeners. `better-compute serve` calls Run.
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
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/api"
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
	// Clock is the registry's one clock: records, certificates, workflow timeouts,
	// command expiry and every periodic task follow it. clock.Real when nil.
	Clock clock.Clock
}

// Info describes a running registry, for the operator.
type Info struct {
	// URL is the API's base URL.
	URL string
	// AdminConfig is the path of the admin's CLI config.
	AdminConfig string
	// FirstStart is true when this start made the root tenant and its admin credential.
	FirstStart bool
	// AgentEndpoint is the agents' QUIC endpoint as agents on this host dial it.
	AgentEndpoint string
	// Pins are what `bcd join` must be given to trust this registry; also in PinsFile.
	Pins     joinwire.Pins
	PinsFile string
}

// Run serves the registry until ctx ends. ready is called once it is listening.
func Run(ctx context.Context, cfg Config, ready func(Info)) error {
	if err := prepareDataDir(cfg.DataDir); err != nil {
		return err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	st, err := cfg.Store.openStore(cfg.DataDir, store.Options{Now: cfg.Clock.Now})
	if err != nil {
		return err
	}
	defer st.Close()
	defer startHousekeeping(ctx, cfg.Clock, st, cfg.Log)()
	keys, err := pki.LoadOrCreate(cfg.DataDir, cfg.Clock)
	if err != nil {
		return fmt.Errorf("registry PKI: %w", err)
	}
	box, err := secret.LoadOrCreate(filepath.Join(cfg.DataDir, pki.Dir))
	if err != nil {
		return err
	}
	userData, err := newUserData(cfg, keys, box)
	if err != nil {
		return err
	}
	hardware, err := loadHardwareProfiles(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return proto.Errorf(proto.InvalidConfig, "listen on %s: %v (pick another --listen address)", cfg.Listen, err)
	}
	info := Info{
		URL:         "https://" + clientAddr(ln.Addr().(*net.TCPAddr).IP, ln.Addr().(*net.TCPAddr).Port),
		AdminConfig: filepath.Join(cfg.DataDir, AdminConfig),
		Pins:        keys.Pins(),
		PinsFile:    filepath.Join(cfg.DataDir, pki.PinsFile),
	}
	if info.FirstStart, err = bootstrap(st, keys, info); err != nil {
		ln.Close()
		return err
	}
	cert, err := newServingCertificate(keys, serverNames(ln.Addr().(*net.TCPAddr)), cfg.Clock.Now, cfg.Log)
	if err != nil {
		ln.Close()
		return err
	}
	sockPath := filepath.Join(cfg.DataDir, api.AdminSocket)
	sock, err := listenAdmin(sockPath)
	if err != nil {
		ln.Close()
		return fmt.Errorf("admin socket: %w", err)
	}

	plane, err := startAgentPlane(cfg, st, keys, cert, userData, box, info.URL)
	if err != nil {
		ln.Close()
		sock.Close()
		return err
	}
	defer plane.ep.Close()
	udp := plane.ep.Addr().(*net.UDPAddr)
	info.AgentEndpoint = clientAddr(udp.IP, udp.Port)
	joinSvc := join.NewService(st, keys, info.AgentEndpoint, cfg.Log)
	wellKnown, err := joinSvc.WellKnownHandler()
	if err != nil {
		ln.Close()
		sock.Close()
		return err
	}
	joins, engine := plane.joins, plane.engine
	metalSvc := metal.New(metal.Config{Store: st, Engine: engine, Joins: joins, HardwareProfiles: hardware,
		Images: catalog{st}, AllowUnsignedImages: cfg.AllowUnsignedImages, UserData: renderer{st, userData}, Generations: plane.ep,
		Ramdisk: plane, Identities: plane.ep, Presence: plane, Clock: cfg.Clock, Log: cfg.Log})

	apiSrv := api.NewServer(st, cfg.Log)
	apiSrv.RegisterAll()
	apiSrv.RegisterJoin(recordJoins{joinSvc, joins, cfg.Log})
	apiSrv.RegisterUserData(userData)
	apiSrv.RegisterSecrets(box)
	apiSrv.RegisterMetal(metalSvc)
	apiSrv.RegisterWorkflows(engine)
	mux := http.NewServeMux()
	mux.Handle("GET "+joinwire.WellKnownPath, wellKnown)
	mux.Handle("/", apiSrv)
	httpsSrv := &http.Server{
		Handler:   mux,
		TLSConfig: &tls.Config{GetCertificate: cert.get, MinVersion: tls.VersionTLS13},
		ErrorLog:  slog.NewLogLogger(cfg.Log.Handler(), slog.LevelWarn),
	}
	api.BoundServer(httpsSrv)
	hostSrv := &http.Server{Handler: apiSrv.HostHandler(), ReadHeaderTimeout: 10 * time.Second}
	runs, stopRuns := context.WithCancel(ctx)
	defer engine.Wait()
	defer stopRuns()
	defer startRemediation(runs, cfg.Clock, metalSvc, cfg.Log)()
	go plane.sites.Run(runs)
	if err := engine.Resume(runs); err != nil {
		ln.Close()
		sock.Close()
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- httpsSrv.ServeTLS(ln, "", "") }()
	go func() { errc <- hostSrv.Serve(sock) }()
	cfg.Log.Info("registry serving", "url", info.URL, "dataDir", cfg.DataDir, "adminSocket", sockPath)
	if ready != nil {
		ready(info)
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	httpsSrv.Shutdown(shutdown)
	hostSrv.Shutdown(shutdown)
	os.Remove(sockPath)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// prepareDataDir makes the data directory, mode 0700, when it does not exist, and refuses
// one that its group or others can enter: it holds the store, the keys, admin.conf and the
// admin socket, which acts as root.
func prepareDataDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return proto.Errorf(proto.InvalidConfig, "make the data directory's parent: %v", err).WithPath("--data-dir")
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
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

func (r recordJoins) Join(ctx context.Context, req joinwire.Request) (joinwire.Response, error) {
	resp, err := r.Joiner.Join(ctx, req)
	if err == nil {
		if err := r.joins.Joined(req.NodeID, req.Role); err != nil {
			r.log.Error("recording a join", "node", req.NodeID, "role", req.Role, "err", err)
		}
	}
	return resp, err
}

// bootstrap makes the root tenant and the admin credential on first start, writing
// admin.conf before the transaction commits: a crash in between leaves no root tenant,
// so the next start does it again. On later starts it refreshes admin.conf's server URL
// and CA, keeping its credential.
func bootstrap(st *store.Store, keys *pki.PKI, info Info) (first bool, err error) {
	cfg := api.ClientConfig{Server: info.URL, ServingCA: string(keys.ServingCAPEM)}
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
		return api.WriteClientConfig(info.AdminConfig, cfg)
	})
	if err != nil || first {
		return first, err
	}
	old, err := api.LoadClientConfig(info.AdminConfig)
	if err != nil {
		// The admin removed or replaced it; the credential cannot be recovered from the
		// store, and that is their call.
		return false, nil
	}
	if old.Server == cfg.Server && old.ServingCA == cfg.ServingCA {
		return false, nil
	}
	cfg.Credential = old.Credential
	return false, api.WriteClientConfig(info.AdminConfig, cfg)
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
