// Package bcdconf is bcd's configuration directory (/etc/bcd by default): config.toml,
// written by `bcd join` and read by the agent modes, and the key, certificates and join
// encryption key beside it.
package bcdconf

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/pelletier/go-toml/v2"
)

// The files of the configuration directory besides bcdargv.ConfigFile and
// bcdargv.JoinEncryptionFile; the directory is bcdargv.ConfigDir unless told otherwise.
const (
	// KeyFile is the agent's private key, PKCS#8 PEM, mode 0600.
	KeyFile = "agent.key"
	// CertFile is the agent's client certificate, PEM, from the agent CA.
	CertFile = "agent.crt"
	// AgentCAFile is the agent CA certificate, PEM.
	AgentCAFile = "agent-ca.crt"
	// ServingCAFile is the registry's serving CA certificate, PEM: what the registry's
	// HTTPS and QUIC certificates chain to.
	ServingCAFile = "serving-ca.crt"
	// RenewedFile holds a renewed key and certificate (PEM, mode 0600) while they replace
	// KeyFile and CertFile (SaveRenewed).
	RenewedFile = "agent.renewed.pem"
)

// Version is the version of config.toml this bcd writes and reads.
const Version = 1

// Config is config.toml. Unknown keys are refused.
type Config struct {
	// Version is 1.
	Version int `toml:"version"`
	// Server is the registry's base URL, https://host:port.
	Server string `toml:"server"`
	// AgentEndpoint is the registry's QUIC endpoint, host:port on UDP.
	AgentEndpoint string `toml:"agentEndpoint,omitempty"`
	// AgentEndpoints are the QUIC endpoints of every replica of the registry: the agent
	// connects to another when its replica is gone.
	AgentEndpoints []string `toml:"agentEndpoints,omitempty"`
	// NodeID is the node this agent is; its certificate's CommonName.
	NodeID string `toml:"nodeId"`
	// Role is site, ramdisk or node; its certificate's OrganizationalUnit.
	Role string `toml:"role"`
	// Site is the site the join token named, if any.
	Site string `toml:"site,omitempty"`
	// The pins the agent joined with.
	ServingCAPin      string `toml:"servingCaPin"`
	JoinSigningPin    string `toml:"joinSigningPin"`
	JoinEncryptionPin string `toml:"joinEncryptionPin"`
	// MetricsListen is the address, host:port, `bcd node` serves its Prometheus metrics
	// on at /metrics over HTTP, without credential; empty (the default) serves none. The
	// operator adds it; bcd join never writes it, and bcd keeps it when it saves the file.
	MetricsListen string `toml:"metricsListen,omitempty"`
}

// Check refuses a config with a missing or malformed field.
func (c Config) Check() error {
	if c.Version != Version {
		return fmt.Errorf("version %d; this bcd reads version %d", c.Version, Version)
	}
	if u, err := url.Parse(c.Server); err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("server %q is not an https:// URL", c.Server)
	}
	if err := proto.CheckNodeID(c.NodeID); err != nil {
		return fmt.Errorf("nodeId: %s", proto.AsError(err).Message)
	}
	if err := joinwire.CheckRole(c.Role); err != nil {
		return fmt.Errorf("role: %v", err)
	}
	if err := joinwire.CheckEndpoints(c.AgentEndpoints); err != nil {
		return fmt.Errorf("agentEndpoints%v", err)
	}
	for name, pin := range map[string]string{"servingCaPin": c.ServingCAPin, "joinSigningPin": c.JoinSigningPin, "joinEncryptionPin": c.JoinEncryptionPin} {
		if err := joinwire.CheckPin(pin); err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
	}
	if _, _, err := net.SplitHostPort(c.MetricsListen); c.MetricsListen != "" && err != nil {
		return fmt.Errorf("metricsListen %q: give host:port, such as 127.0.0.1:9465", c.MetricsListen)
	}
	return nil
}

// Endpoints are the registry's agent endpoints: AgentEndpoint, then the other
// replicas' of AgentEndpoints.
func (c Config) Endpoints() []string {
	out := []string{c.AgentEndpoint}
	for _, e := range c.AgentEndpoints {
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}

// header starts every config.toml bcd writes.
const header = "# bcd's configuration, written by `bcd join`. The key and certificates are beside it.\n"

// Encode renders a checked config as config.toml.
func Encode(c Config) ([]byte, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	body, err := toml.Marshal(c)
	if err != nil {
		return nil, err
	}
	return append([]byte(header), body...), nil
}

// Decode reads config.toml, refusing unknown keys and malformed values.
func Decode(data []byte) (Config, error) {
	var c Config
	if err := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields().Decode(&c); err != nil {
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) {
			return Config{}, fmt.Errorf("unknown key: %s", strict.String())
		}
		return Config{}, err
	}
	return c, c.Check()
}

// Load reads dir/config.toml.
func Load(dir string) (Config, error) {
	path := filepath.Join(dir, bcdargv.ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := Decode(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
