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
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/jsondoc"
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
	// LockFile is the empty file Write holds an exclusive flock(2) on while it writes
	// (lockDir).
	LockFile = ".join.lock"
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

// Check returns every problem of c as INVALID_CONFIG at the toml key of its field, joined.
func (c Config) Check() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, proto.Errorf(proto.InvalidConfig, format, args...).WithPath(key))
	}
	if c.Version != Version {
		bad("version", "version %d; this bcd reads version %d: run `bcd join` again with this bcd", c.Version, Version)
	}
	if u, err := url.Parse(c.Server); err != nil || u.Scheme != "https" || u.Host == "" {
		bad("server", "server %q is not an https:// URL: give the registry's https://host:port, as `bcd join --server` took it", c.Server)
	}
	if err := proto.CheckNodeID(c.NodeID); err != nil {
		bad("nodeId", "nodeId: %s: give the node id the agent's certificate names, or run `bcd join` again", proto.AsError(err).Message)
	}
	if err := joinwire.CheckRole(c.Role); err != nil {
		bad("role", "%v: give the role the agent joined as, or run `bcd join` again", err)
	}
	if err := joinwire.CheckEndpoints(c.AgentEndpoints); err != nil {
		bad("agentEndpoints", "agentEndpoints%v: give each registry replica's QUIC endpoint as host:port", err)
	}
	for _, p := range []struct{ key, pin string }{{"servingCaPin", c.ServingCAPin}, {"joinSigningPin", c.JoinSigningPin}, {"joinEncryptionPin", c.JoinEncryptionPin}} {
		if err := joinwire.CheckPin(p.pin); err != nil {
			bad(p.key, "%s: %v: give the pin `better-compute serve` printed, or run `bcd join` again", p.key, err)
		}
	}
	if _, _, err := net.SplitHostPort(c.MetricsListen); c.MetricsListen != "" && err != nil {
		bad("metricsListen", "metricsListen %q: give host:port, such as 127.0.0.1:9465", c.MetricsListen)
	}
	return errors.Join(errs...)
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

// Decode reads config.toml, refusing unknown keys and malformed values: every refusal is
// INVALID_CONFIG at the offending toml key (Check), or at jsondoc.WholeFile (".") when
// the text is not TOML that names one, as the project's JSON files do.
func Decode(data []byte) (Config, error) {
	var c Config
	if err := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields().Decode(&c); err != nil {
		return Config{}, decodeError(err)
	}
	return c, c.Check()
}

// decodeError is a TOML decoding error as INVALID_CONFIG at the key it names: each
// unknown key of a strict decoding, else the key the error is about.
func decodeError(err error) error {
	if strict, ok := errors.AsType[*toml.StrictMissingError](err); ok {
		var errs []error
		for _, e := range strict.Errors {
			key := keyPath(e.Key())
			errs = append(errs, proto.Errorf(proto.InvalidConfig, "unknown key %s: remove it; the keys are in docs/join.md", key).WithPath(key))
		}
		return errors.Join(errs...)
	}
	path, at := string(jsondoc.WholeFile), "" // a refusal that names no key
	if de, ok := errors.AsType[*toml.DecodeError](err); ok {
		if key := keyPath(de.Key()); key != "" {
			path = key
		}
		line, col := de.Position()
		at = fmt.Sprintf(" at line %d, column %d", line, col)
	}
	return proto.Errorf(proto.InvalidConfig, "not acceptable TOML%s: %v: fix the file, or run `bcd join` again to write it", at, err).WithPath(path)
}

// keyPath writes a toml key as the file would: its parts joined by dots, a part that is
// not a bare key (empty, or holding a dot, a space or a quote) quoted, so an unknown key
// "" or "a.b" is named as such rather than as nothing or as the table a's key b.
func keyPath(key []string) string {
	parts := make([]string, len(key))
	for i, k := range key {
		parts[i] = k
		if k == "" || strings.ContainsFunc(k, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
		}) {
			parts[i] = strconv.Quote(k)
		}
	}
	return strings.Join(parts, ".")
}

// Load reads dir/config.toml. A refusal is INVALID_CONFIG at the key (Decode), its
// message naming the file.
func Load(dir string) (Config, error) {
	path := filepath.Join(dir, bcdargv.ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := Decode(data)
	if err != nil {
		var errs []error
		for _, e := range proto.Joined(err) {
			pe := proto.AsError(e)
			errs = append(errs, proto.Errorf(pe.Code, "%s: %s", path, pe.Message).WithPath(pe.Details.Path))
		}
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}
