// Package join is bcd's side of the join: `bcd join` fetches the registry's well-known
// document, trusts it only as far as the three pins it was given match, seals its join
// token to the pinned JoinService key, verifies the signed JoinResponse, and only then
// writes its key, certificates and config.toml. On any failure nothing is written and
// the token file stays.
package join

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/better-compute/better-compute/proto/joinwire"
)

// Result is what a successful join did.
type Result struct {
	// Config is the config.toml written into ConfigDir.
	Config    bcdconf.Config
	ConfigDir string
	// TokenFileErr is set when the join succeeded but the token file could not be
	// removed (the token is spent either way).
	TokenFileErr error
}

// Join joins the registry at o.Server as o.NodeID in o.Role.
func Join(ctx context.Context, o Options) (Result, error) {
	server, err := o.Check()
	if err != nil {
		return Result{}, err
	}
	token, err := readToken(o.TokenFile)
	if err != nil {
		return Result{}, err
	}
	local, err := localEncryptionKey(o.ConfigDir, o.Pins.JoinEncryption)
	if err != nil {
		return Result{}, err
	}
	body, peer, err := fetchDocument(ctx, server)
	if err != nil {
		return Result{}, err
	}
	anchors, err := trust(body, peer, server.Hostname(), o.Pins)
	if err != nil {
		return Result{}, err
	}
	sealTo := anchors.JoinEncryptionKey
	if local != nil {
		sealTo = local
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Result{}, err
	}
	spki, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return Result{}, err
	}
	sealed, err := joinwire.SealToken(sealTo, joinwire.AAD(o.NodeID, o.Role, spki), token)
	if err != nil {
		return Result{}, err
	}
	req := joinwire.Request{
		NodeID:      o.NodeID,
		Role:        o.Role,
		PublicKey:   base64.StdEncoding.EncodeToString(spki),
		SealedToken: base64.StdEncoding.EncodeToString(sealed),
	}
	answer, err := post(ctx, server, anchors.ServingCA, req, o.Clock, o.Log)
	if err != nil {
		return Result{}, err
	}
	payload, err := acceptResponse(answer, anchors.JoinSigningKey, o.NodeID, o.Role, key.Public())
	if err != nil {
		return Result{}, err
	}
	// The key the token was sealed to is the one written: a local one (the ramdisk
	// installed it) matched the same pin as the well-known document's.
	anchors.JoinEncryptionKey = sealTo
	cfg, err := WriteBundle(o.ConfigDir, server.String(), o.Pins, anchors, key, payload)
	if err != nil {
		return Result{}, proto.Errorf(proto.Internal, "joined, but writing %s failed: %v; mint a new token and join again", o.ConfigDir, err)
	}
	return Result{Config: cfg, ConfigDir: o.ConfigDir, TokenFileErr: os.Remove(o.TokenFile)}, nil
}

// WriteBundle writes what a join got into the bcd configuration directory dir
// (bcdconf.Write), as bcd join does once the registry's signed answer checked out: the
// agent's private key, the certificate and agent CA of payload, the serving CA and
// JoinService encryption key of anchors, and a config.toml for the registry at server
// (its base URL) with pins. It returns that config.
func WriteBundle(dir, server string, pins joinwire.Pins, anchors joinwire.Anchors, key *ecdsa.PrivateKey, payload joinwire.Payload) (bcdconf.Config, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return bcdconf.Config{}, err
	}
	jwk, err := proto.Marshal(joinwire.NewJWK(anchors.JoinEncryptionKey))
	if err != nil {
		return bcdconf.Config{}, err
	}
	cfg := bcdconf.Config{
		Version:           bcdconf.Version,
		Server:            strings.TrimRight(server, "/"),
		AgentEndpoint:     payload.AgentEndpoint,
		AgentEndpoints:    payload.AgentEndpoints,
		NodeID:            payload.NodeID,
		Role:              payload.Role,
		Site:              payload.Site,
		ServingCAPin:      pins.ServingCA,
		JoinSigningPin:    pins.JoinSigning,
		JoinEncryptionPin: pins.JoinEncryption,
	}
	return cfg, bcdconf.Write(dir, bcdconf.Bundle{
		Config:            cfg,
		Key:               pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Certificate:       []byte(payload.Certificate),
		AgentCA:           []byte(payload.AgentCA),
		ServingCA:         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: anchors.ServingCA.Raw}),
		JoinEncryptionKey: append(jwk, '\n'),
	})
}

// readToken reads the join token from its file.
func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", proto.Errorf(proto.InvalidConfig, "read the join token: %v", err).WithPath("--token-file")
	}
	token := string(bytes.TrimSpace(data))
	if token == "" {
		return "", proto.Errorf(proto.InvalidConfig, "the join token file %s is empty", path).WithPath("--token-file")
	}
	return token, nil
}

// localEncryptionKey reads join-encryption.jwk from the config directory, if there is
// one (the ramdisk installs it into the OS it writes); it must match the pin.
func localEncryptionKey(dir, pin string) (*ecdh.PublicKey, error) {
	path := filepath.Join(dir, bcdargv.JoinEncryptionFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, proto.Errorf(proto.InvalidConfig, "read %s: %v", path, err)
	}
	key, err := joinwire.ParseJWK(data)
	if err != nil {
		return nil, proto.Errorf(proto.InvalidConfig, "%s: %v", path, err)
	}
	if !joinwire.MatchPin(pin, key) {
		return nil, proto.Errorf(proto.Unauthenticated, "%s does not match --join-encryption-pin: refusing to seal the token to it", path).WithPath("--join-encryption-pin").WithReason(proto.ReasonPinMismatch)
	}
	return key, nil
}

// busyRetries bounds how often bcd join sends its request again to a registry that
// answers UNAVAILABLE: serving as many joins as it takes at once, or refusing for now the
// joins of an address that sent too many refused tokens (reason source-failures), it has
// read nothing of the request, so the token is unspent. Each wait is the answer's
// Retry-After (1 to 30 seconds), logged.
const busyRetries = 20

// post sends the join request over TLS verified against the pinned serving CA and
// returns the body of a successful answer; a refusal is the registry's own error. A busy
// registry's refusal is retried after its Retry-After on clk (clock.Real when nil), each
// wait logged to log at Info; the refusal that ends the retries says what to do.
func post(ctx context.Context, server *url.URL, ca *x509.Certificate, req joinwire.Request, clk clock.Clock, log *slog.Logger) ([]byte, error) {
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	client := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}},
		Timeout:       time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer client.CloseIdleConnections()
	reqBody, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	u := server.JoinPath("/v1/" + joinwire.JoinMethod)
	for attempt := 1; ; attempt++ {
		status, retryAfter, body, err := postOnce(ctx, client, u, reqBody)
		if err != nil {
			return nil, err
		}
		if status == http.StatusOK {
			return body, nil
		}
		var e proto.Error
		if json.Unmarshal(body, &e) != nil || e.Code == "" {
			return nil, proto.Errorf(proto.Internal, "the registry answered the join with status %d: %.200s", status, bytes.TrimSpace(body))
		}
		if e.Code != proto.Unavailable {
			return nil, proto.Errorf(e.Code, "the registry refused the join: %s", e.Message).WithPath(e.Details.Path).WithReason(e.Details.Reason)
		}
		if attempt > busyRetries {
			return nil, proto.Errorf(e.Code, "the registry refused the join for now %d times in a row, the last: %s. %s",
				attempt, e.Message, gaveUp(e.Details.Reason)).WithReason(e.Details.Reason)
		}
		log.Info("the registry refused the join for now: bcd join waits, then sends it again", "attempt", attempt, "of", busyRetries+1,
			"waitSeconds", int(retryAfter/time.Second), "code", e.Code, "reason", e.Details.Reason, "message", e.Message,
			"todo", "nothing: the token is unspent and bcd join sends it again by itself; stop bcd join to give up")
		select {
		case <-ctx.Done():
			return nil, proto.Errorf(proto.Timeout, "the join ran out of time (%v) waiting to send its request again to the registry, which refused it for now: %s. %s",
				ctx.Err(), e.Message, gaveUp(e.Details.Reason)).WithReason(e.Details.Reason)
		case <-clk.After(retryAfter):
		}
	}
}

// gaveUp says what to do once bcd join stopped sending a join the registry refused for
// now (UNAVAILABLE) with reason.
func gaveUp(reason string) string {
	const unspent = "The token is unspent: run bcd join again with it later"
	if reason == proto.ReasonSourceFailures {
		return unspent + ". The registry checks no credential from this machine's address while too many refused ones come from it " +
			"(machines behind one NAT share it: a stranger there, or a machine retrying a used token): its WARN " +
			"\"too many failed credential checks from a source\" names the address; its operator may raise serve --auth-failure-burst"
	}
	return unspent + ", once the registry is less busy"
}

// postOnce sends the join request once and returns the answer's status, Retry-After (1 to
// 30 seconds) and body.
func postOnce(ctx context.Context, client *http.Client, u *url.URL, reqBody []byte) (int, time.Duration, []byte, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(reqBody))
	if err != nil {
		return 0, 0, nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(hreq)
	if err != nil {
		return 0, 0, nil, proto.Errorf(proto.Internal, "send the join request to %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, joinwire.MaxDocument+1))
	if err != nil {
		return 0, 0, nil, proto.Errorf(proto.Internal, "read the answer to the join request: %v", err)
	}
	seconds, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return resp.StatusCode, time.Duration(min(max(seconds, 1), 30)) * time.Second, body, nil
}
