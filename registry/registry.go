// Package registry assembles the central registry from its rooms: the store, the PKI,
// the API and its methods, the agent endpoint, and the listeners. `better-compute serve`
// calls Run.
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

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/store"
)

// AdminConfig is the name of the admin's CLI config in the data directory.
const AdminConfig = "admin.conf"

// DefaultAgentListen is the agent endpoint's UDP address when Config.AgentListen is empty.
const DefaultAgentListen = "127.0.0.1:7444"

// Config is what `serve` is started with.
type Config struct {
	// DataDir holds the store, the PKI, admin.conf and the admin socket.
	DataDir string
	// Listen is the HTTPS API's address, host:port.
	Listen string
	// AgentListen is the agent endpoint's UDP address, host:port (DefaultAgentListen
	// when empty).
	AgentListen string
	// Log receives the registry's structured logs.
	Log *slog.Logger
}

// Info describes a running registry, for the operator.
type Info struct {
	// URL is the API's base URL.
	URL string
	// AgentAddr is the agent endpoint's UDP address.
	AgentAddr string
	// AdminConfig is the path of the admin's CLI config.
	AdminConfig string
	// FirstStart is true when this start made the root tenant and its admin credential.
	FirstStart bool
}

// Run serves the registry until ctx ends. ready is called once it is listening.
func Run(ctx context.Context, cfg Config, ready func(Info)) error {
	st, err := store.Open(cfg.DataDir, store.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	keys, err := pki.LoadOrCreate(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("registry PKI: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return proto.Errorf(proto.InvalidConfig, "listen on %s: %v (pick another --listen address)", cfg.Listen, err)
	}
	info := Info{URL: "https://" + clientAddr(ln.Addr().(*net.TCPAddr)), AdminConfig: filepath.Join(cfg.DataDir, AdminConfig)}
	if info.FirstStart, err = bootstrap(st, keys, info); err != nil {
		ln.Close()
		return err
	}
	if cfg.AgentListen == "" {
		cfg.AgentListen = DefaultAgentListen
	}
	names := serverNames(ln.Addr().(*net.TCPAddr))
	if host, _, err := net.SplitHostPort(cfg.AgentListen); err == nil && host != "" {
		names = append(names, host)
	}
	cert, err := keys.ServerCertificate(names)
	if err != nil {
		ln.Close()
		return err
	}
	agentCAs, err := pki.LoadOrCreateAgentCA(cfg.DataDir)
	if err != nil {
		ln.Close()
		return fmt.Errorf("agent CA: %w", err)
	}
	endpoint, err := agents.Start(agents.Config{Listen: cfg.AgentListen, Certificate: cert, AgentCAs: agentCAs, Store: st, Log: cfg.Log})
	if err != nil {
		ln.Close()
		return err
	}
	defer endpoint.Close()
	info.AgentAddr = endpoint.Addr().String()
	sockPath := filepath.Join(cfg.DataDir, api.AdminSocket)
	os.Remove(sockPath)
	sock, err := net.Listen("unix", sockPath)
	if err != nil {
		ln.Close()
		return fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Chmod(sockPath, 0o600); err != nil {
		ln.Close()
		sock.Close()
		return err
	}

	apiSrv := api.NewServer(st, cfg.Log)
	apiSrv.RegisterAll()
	httpsSrv := &http.Server{
		Handler:           apiSrv,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(cfg.Log.Handler(), slog.LevelWarn),
	}
	hostSrv := &http.Server{Handler: apiSrv.HostHandler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- httpsSrv.ServeTLS(ln, "", "") }()
	go func() { errc <- hostSrv.Serve(sock) }()
	cfg.Log.Info("registry serving", "url", info.URL, "agents", info.AgentAddr, "dataDir", cfg.DataDir, "adminSocket", sockPath)
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
		_, cfg.Credential, err = tx.CreateCredential(store.RootTenant, []string{api.ActionAll})
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
func clientAddr(a *net.TCPAddr) string {
	ip := a.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(a.Port))
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
