package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
)

// AdminSocket is the name of the host-only socket in the data directory.
const AdminSocket = "admin.sock"

// ClientConfig is what the CLI needs to reach a registry: written by `serve` as
// admin.conf and by `credentials create --out`. Unknown fields are refused.
type ClientConfig struct {
	// Version is the file format, 1.
	Version int `json:"version"`
	// Server is the registry's base URL, https://host:port.
	Server string `json:"server"`
	// ServingCA is the PEM of the CA that signs the registry's certificate.
	ServingCA string `json:"servingCA"`
	// Credential is the bearer secret.
	Credential string `json:"credential"`
}

// WriteClientConfig writes cfg to path, readable by its owner only.
func WriteClientConfig(path string, cfg ClientConfig) error {
	cfg.Version = 1
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, append(data, '\n'), 0o600)
}

// LoadClientConfig reads a config file written by WriteClientConfig. A file its group or
// others may use is refused (INVALID_CONFIG, fsutil.ReadPrivate): it holds a credential.
func LoadClientConfig(path string) (ClientConfig, error) {
	var cfg ClientConfig
	data, err := fsutil.ReadPrivate(path) // it holds a credential
	if errors.Is(err, fsutil.ErrExposed) {
		return cfg, proto.Errorf(proto.InvalidConfig, "the CLI config %v", err)
	}
	if err != nil {
		return cfg, proto.Errorf(proto.InvalidConfig, "read the CLI config: %v (pass --config FILE or set BC_CONFIG; `serve` writes DATA_DIR/admin.conf)", err)
	}
	if err := DecodeStrict(data, &cfg); err != nil {
		return cfg, proto.Errorf(proto.InvalidConfig, "%s: %s", path, proto.AsError(err).Message).WithPath(proto.AsError(err).Details.Path)
	}
	if cfg.Version != 1 || cfg.Server == "" || cfg.Credential == "" {
		return cfg, proto.Errorf(proto.InvalidConfig, "%s: not a version 1 config with server and credential", path)
	}
	return cfg, nil
}

// Client calls a registry's API.
type Client struct {
	base   string
	bearer string
	http   *http.Client
	// where names what the client reaches, for messages: the registry's URL, or the
	// admin socket and its data directory.
	where string
}

// NewClient makes a client that trusts only the config's serving CA.
func NewClient(cfg ClientConfig) (*Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cfg.ServingCA)) {
		return nil, proto.Errorf(proto.InvalidConfig, "the config's servingCA holds no PEM certificate").WithPath("servingCA")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}}
	base := strings.TrimRight(cfg.Server, "/")
	return &Client{
		base:   base,
		bearer: cfg.Credential,
		http:   &http.Client{Transport: tr, Timeout: 5 * time.Minute},
		where:  "the registry at " + base,
	}, nil
}

// NewHostClient makes a client for the admin socket of the registry whose data
// directory is dataDir: the host-only channel.
func NewHostClient(dataDir string) *Client {
	sock := filepath.Join(dataDir, AdminSocket)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	return &Client{base: "http://admin", http: &http.Client{Transport: tr, Timeout: 5 * time.Minute},
		where: fmt.Sprintf("the admin socket %s of a registry running with --data-dir %s", sock, dataDir)}
}

// Call invokes method with req and decodes the answer into resp (which may be nil).
// A failure is the registry's *proto.Error, or one that says the registry is out of reach.
func (c *Client) Call(ctx context.Context, method string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/"+method, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if c.bearer != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	hresp, err := c.http.Do(hreq)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // the dial's own words, without the method's internal URL
		}
		return proto.Errorf(proto.Internal, "cannot reach %s: %v (is `better-compute serve` running?)", c.where, err)
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(hresp.Body)
	if err != nil {
		return err
	}
	if hresp.StatusCode != http.StatusOK {
		var e proto.Error
		if json.Unmarshal(data, &e) != nil || e.Code == "" {
			return proto.Errorf(proto.Internal, "registry answered %s: %s", hresp.Status, bytes.TrimSpace(data))
		}
		return &e
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(data, resp); err != nil {
		return fmt.Errorf("decode the answer to %s: %w", method, err)
	}
	return nil
}
