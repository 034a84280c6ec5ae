package api

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
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
	// path is the file LoadClientConfig read, for messages.
	path string
}

// WriteClientConfig writes cfg to path, readable by its owner only.
func WriteClientConfig(path string, cfg ClientConfig) error {
	return fsutil.WriteFileAtomic(path, EncodeClientConfig(cfg), 0o600)
}

// EncodeClientConfig is the file WriteClientConfig writes: cfg as version 1.
func EncodeClientConfig(cfg ClientConfig) []byte {
	cfg.Version = 1
	data, _ := json.MarshalIndent(cfg, "", "  ") // strings and an int: it cannot fail
	return append(data, '\n')
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
	if err := cfg.check(path); err != nil {
		return cfg, err
	}
	if err := checkServer(cfg.Server); err != nil {
		return cfg, proto.Errorf(proto.InvalidConfig, "%s: server %q %v", path, cfg.Server, err).WithPath("server")
	}
	cfg.path = path
	return cfg, nil
}

// check refuses a config without version 1, a server or a credential, at that field: a
// config edited by hand says which it lacks.
func (cfg ClientConfig) check(path string) error {
	switch {
	case cfg.Version != 1:
		return proto.Errorf(proto.InvalidConfig, "%s: version %d; this CLI reads version 1 configs", path, cfg.Version).WithPath("version")
	case cfg.Server == "":
		return proto.Errorf(proto.InvalidConfig, "%s: no server: give the registry's base URL, https://HOST:PORT", path).WithPath("server")
	case cfg.Credential == "":
		return proto.Errorf(proto.InvalidConfig, "%s: no credential: give the bearer secret `credentials create --out` wrote", path).WithPath("credential")
	}
	return nil
}

// checkServer refuses a server that is not a registry's base URL, https://HOST:PORT: the
// client sends its bearer credential to it, and over anything but https (a typo of
// http://, a URL without a scheme) it would go in the clear, to whatever answers there,
// trusting no servingCA. User info, a query or a fragment would be sent or dropped with
// every call's path, never what the operator meant.
func checkServer(server string) error {
	u, err := url.Parse(server)
	switch {
	case err != nil:
		return fmt.Errorf("is not a URL: %v", err)
	case u.Scheme != "https" || u.Host == "" || u.Opaque != "":
		return errors.New("is not an https URL of a host (https://HOST:PORT): the credential is sent only over TLS")
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.TrimSuffix(u.Path, "/") != "":
		return errors.New("has more than https://HOST:PORT (a user, a path, a query or a fragment)")
	}
	return nil
}

// Client calls a registry's API.
type Client struct {
	base   string
	bearer string
	http   *http.Client
	// config is the CLI config file the client was made from; "" when it was not read
	// from a file.
	config string
	// ca is the serving CA the client trusts; nil for the admin socket.
	ca *x509.Certificate
	// socket is the admin socket a host client dials; "" for HTTPS.
	socket string
	// log is told when a refused call waits to be sent again; slog's default when nil.
	log *slog.Logger
	// remote is the address a handler client's calls come from (OnBehalfOf); "" for
	// none.
	remote string
	// inProcess is a handler client's: it serves a request that waits for its answer,
	// so it sends no refused call again, and its caller answers with the refusal's
	// Retry-After at once.
	inProcess bool
}

// LogTo makes log the logger the client tells when it waits to send a refused call again.
func (c *Client) LogTo(log *slog.Logger) { c.log = log }

// OnBehalfOf makes a handler client's calls those of the browser request r (the
// console's sign-in): they come from r's remote address, whose failed credential checks
// the API bounds as it bounds a call over the network from there.
func (c *Client) OnBehalfOf(r *http.Request) { c.remote = r.RemoteAddr }

// A call the registry refused UNAVAILABLE with Retry-After (a tenant's or the public
// calls' bound: refused before the method ran) is sent again up to maxRetries times,
// after the seconds the answer asks, at most maxRetryWait each.
const (
	maxRetries   = 5
	maxRetryWait = 10 * time.Second
)

// Transport timeouts: how long a registry may take to accept the connection and to
// finish the TLS handshake before it counts as out of reach.
const (
	dialTimeout      = 10 * time.Second
	handshakeTimeout = 10 * time.Second
)

// NewClient makes a client that trusts only the config's serving CA.
func NewClient(cfg ClientConfig) (*Client, error) {
	pool := x509.NewCertPool()
	block, _ := pem.Decode([]byte(cfg.ServingCA))
	var ca *x509.Certificate
	if block != nil {
		ca, _ = x509.ParseCertificate(block.Bytes)
	}
	if ca == nil || !pool.AppendCertsFromPEM([]byte(cfg.ServingCA)) {
		return nil, proto.Errorf(proto.InvalidConfig, "the servingCA of %s holds no PEM certificate", configName(cfg.path)).WithPath("servingCA")
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13},
		DialContext:         (&net.Dialer{Timeout: dialTimeout}).DialContext,
		TLSHandshakeTimeout: handshakeTimeout,
	}
	return &Client{
		base:   strings.TrimRight(cfg.Server, "/"),
		bearer: cfg.Credential,
		http:   &http.Client{Transport: tr, Timeout: 5 * time.Minute},
		config: cfg.path,
		ca:     ca,
	}, nil
}

// configName names a CLI config file in messages.
func configName(path string) string {
	if path == "" {
		return "the CLI config"
	}
	return path
}

// NewHostClient makes a client for the admin socket of the registry whose data
// directory is dataDir: the host-only channel.
func NewHostClient(dataDir string) *Client {
	sock := filepath.Join(dataDir, AdminSocket)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	return &Client{base: "http://admin", http: &http.Client{Transport: tr, Timeout: 5 * time.Minute}, socket: sock}
}

// unreachable says why a call did not reach the registry, and what to do: a server
// whose certificate the config's CA does not accept is INVALID_CONFIG at servingCA,
// naming both certificates; anything else (refused, no answer in time, no socket) is
// UNAVAILABLE.
func (c *Client) unreachable(err error) error {
	var cve *tls.CertificateVerificationError
	if errors.As(err, &cve) && len(cve.UnverifiedCertificates) > 0 {
		leaf := cve.UnverifiedCertificates[0]
		return proto.Errorf(proto.InvalidConfig, "the server at %s is not the registry %s was written for: its certificate (subject %q, issuer %q, sha256 %s) "+
			"is not accepted by the config's servingCA (subject %q, sha256 %s): %v. Use the admin.conf (or a credentials create --out file) of the registry at %s, "+
			"or set the config's server to the registry that wrote it",
			c.base, configName(c.config), leaf.Subject, leaf.Issuer, fingerprint(leaf), c.ca.Subject, fingerprint(c.ca), cve.Err, c.base).WithPath("servingCA")
	}
	cause := err
	var ue *url.Error
	if errors.As(err, &ue) {
		cause = ue.Err
	}
	var oe *net.OpError
	if errors.As(cause, &oe) {
		cause = oe.Err // without the address the message names already
	}
	if c.socket != "" {
		return proto.Errorf(proto.Unavailable, "no registry answers on the admin socket %s (%v): is `better-compute serve --data-dir %s` running on this host? "+
			"--data-dir must be that registry's data directory", c.socket, cause, filepath.Dir(c.socket))
	}
	var ne net.Error
	what := "cannot reach"
	if errors.As(err, &ne) && ne.Timeout() {
		what = "no answer in time from"
	}
	return proto.Errorf(proto.Unavailable, "%s the registry at %s (%v): is `better-compute serve` running there, and is that the server %s names? Try again once it is",
		what, c.base, cause, configName(c.config))
}

// fingerprint is the SHA-256 of a certificate, hex.
func fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// NewHandlerClient makes a client that calls the API served by h in this process, with
// credential as its bearer: every call goes through h as a call over the network would
// (authentication, the method's action, the tenant checks, the body bounds, the log),
// without a connection. A call refused for now is answered at once, not sent again: the
// request the client serves answers with its Retry-After, so that its user is told then
// rather than after the tries a CLI makes.
func NewHandlerClient(h http.Handler, credential string) *Client {
	return &Client{base: "http://api", bearer: credential, http: &http.Client{Transport: handlerTransport{h}}, inProcess: true}
}

// handlerTransport answers a request by serving it with a handler.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	w := &bufferedResponse{header: http.Header{}}
	t.h.ServeHTTP(w, r)
	status := cmp.Or(w.status, http.StatusOK)
	return &http.Response{Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: w.header, Body: io.NopCloser(&w.body),
		ContentLength: int64(w.body.Len()), Request: r}, nil
}

// bufferedResponse is a response written into memory.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

// Call invokes method with req and decodes the answer into resp (which may be nil).
// A failure is the registry's *proto.Error, or one that says the registry is out of reach.
// A call refused UNAVAILABLE with Retry-After is sent again (maxRetries), logged.
func (c *Client) Call(ctx context.Context, method string, req, resp any) error {
	body, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		wait, err := c.call(ctx, method, body, resp)
		if wait == 0 || attempt > maxRetries || c.inProcess {
			return err
		}
		e := proto.AsError(err)
		cmp.Or(c.log, slog.Default()).Info("the registry refused the call for now; sending it again", "method", method,
			"code", e.Code, "reason", e.Details.Reason, "wait", wait, "attempt", attempt, "of", maxRetries)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// call sends one call. A refusal to be sent again comes with how long to wait first.
func (c *Client) call(ctx context.Context, method string, body []byte, resp any) (time.Duration, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/"+method, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.RemoteAddr = c.remote
	if c.bearer != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	hresp, err := c.http.Do(hreq)
	if err != nil {
		return 0, c.unreachable(err)
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(hresp.Body)
	if err != nil {
		return 0, c.unreachable(err)
	}
	if hresp.StatusCode != http.StatusOK {
		var e proto.Error
		if json.Unmarshal(data, &e) != nil || e.Code == "" {
			return 0, proto.Errorf(proto.Unavailable, "the server at %s answered %s, not as a registry answers (%.200q): is the server of %s a better-compute registry, and is nothing in between failing?",
				c.base, hresp.Status, bytes.TrimSpace(data), configName(c.config))
		}
		err := refusal(&e, hresp.Header.Get("Retry-After"))
		return retryWait(err), err
	}
	if resp == nil {
		return 0, nil
	}
	if err := json.Unmarshal(data, resp); err != nil {
		return 0, proto.Errorf(proto.Unsupported, "the answer of %s to %s does not decode (%v): are the CLI and the registry of one version?", c.base, method, err)
	}
	return 0, nil
}

// refusedForNow is the error of a call the registry refused for now: UNAVAILABLE, with
// the seconds of its answer's Retry-After.
type refusedForNow struct {
	err     *proto.Error
	seconds int
}

func (r *refusedForNow) Error() string { return r.err.Error() }
func (r *refusedForNow) Unwrap() error { return r.err }

// refusal is the error of an answer e with the header retryAfter: e itself, unless it is
// UNAVAILABLE with a Retry-After of seconds, which then come with it (RetryAfter).
func refusal(e *proto.Error, retryAfter string) error {
	seconds, err := strconv.Atoi(retryAfter)
	if e.Code != proto.Unavailable || err != nil || seconds < 0 {
		return e
	}
	return &refusedForNow{err: e, seconds: seconds}
}

// RetryAfter is the seconds the registry asked to wait before sending again a call whose
// error is err, as its answer's Retry-After said: a call it refused for now
// (UNAVAILABLE), which the client did not send again (a handler client's, or one refused
// more than maxRetries times). -1 when the answer asked none.
func RetryAfter(err error) int {
	if r, ok := errors.AsType[*refusedForNow](err); ok {
		return r.seconds
	}
	return -1
}

// retryWait is how long to wait before sending again a call that failed with err: the
// seconds of its Retry-After (at least 1, at most maxRetryWait) when the registry refused
// it for now; else 0, not to be sent again.
func retryWait(err error) time.Duration {
	seconds := RetryAfter(err)
	if seconds < 0 {
		return 0
	}
	return min(max(time.Duration(seconds)*time.Second, time.Second), maxRetryWait)
}
