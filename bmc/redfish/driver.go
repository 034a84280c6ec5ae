package redfish

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// Name is the driver's name in bindings and hardware profiles.
const Name = proto.BMCDriverRedfish

// The options a binding may give the driver.
const (
	// optSystem picks the ComputerSystem by Id when the service has several.
	optSystem = "system"
	// optAuth is session (a Redfish session, logged out by Close) or basic; by default a
	// session where the service offers them, else basic.
	optAuth = "auth"
	// optCAFile names a PEM file of the CAs the BMC's certificate chains to: a file of
	// the site host, which only the platform names (proto.SiteHostFile).
	optCAFile = proto.BMCOptionCAFile
	// optTLSPin is the pin of the BMC's certificate key, sha256/BASE64 of its SPKI.
	optTLSPin = proto.BMCOptionTLSPin
	// optBootMode is uefi or legacy, sent with every boot override; by default only
	// UEFI HTTP boot sends a mode (UEFI).
	optBootMode = "bootMode"
)

// driver is one BMC, logged in.
type driver struct {
	// host is the BMC's host[:port], for messages.
	host   string
	client *gofish.APIClient
	// reads is the client's transport, told when a read of the BMC starts.
	reads    *oneHost
	systemID string
	bootMode schemas.BootSourceOverrideMode
	timing   bmc.Timing
	log      *slog.Logger
	// password is the login's, never quoted in an error (fail): a BMC that repeats what it
	// was sent in its failure's text would carry it into a step's result, which the node's
	// tenant reads while the credential may be the platform's.
	password string
}

// Open checks cfg, resolves its credential and logs in to the Redfish service at
// cfg.Address (host, host:port or https://host[:port]).
func Open(ctx context.Context, cfg bmc.Config, env bmc.Env) (bmc.Driver, error) {
	o := cfg.Options
	if err := bmc.CheckOptions(o, optSystem, optAuth, optCAFile, optTLSPin, optBootMode, proto.BMCOptionPowerTimeout, "pollInterval"); err != nil {
		return nil, err
	}
	endpoint, host, err := endpoint(cfg.Address)
	if err != nil {
		return nil, err
	}
	auth, err := bmc.ChoiceOption(o, optAuth, "", "session", "basic")
	if err != nil {
		return nil, err
	}
	mode, err := bmc.ChoiceOption(o, optBootMode, "", "uefi", "legacy")
	if err != nil {
		return nil, err
	}
	timing, err := bmc.TimingOptions(o)
	if err != nil {
		return nil, err
	}
	httpc, err := httpClient(o[optCAFile], o[optTLSPin], host)
	if err != nil {
		return nil, err
	}
	if cfg.CredentialRef == "" {
		return nil, proto.Errorf(proto.InvalidConfig, "a Redfish BMC needs a credential: give credentialRef").WithPath("credentialRef")
	}
	if err := cfg.CredentialRef.Check(); err != nil {
		return nil, err
	}
	if env.Credentials == nil {
		return nil, proto.Errorf(proto.InvalidConfig, "no credential resolver to resolve %s", string(cfg.CredentialRef)).WithPath("credentialRef")
	}
	cred, err := env.Credentials.Resolve(ctx, cfg.CredentialRef)
	if err != nil {
		return nil, err
	}
	d := &driver{host: host, reads: httpc.Transport.(*oneHost), systemID: o[optSystem], timing: timing, log: env.Logger().With("bmc", host, "driver", Name)}
	switch mode {
	case "uefi":
		d.bootMode = schemas.UEFIBootSourceOverrideMode
	case "legacy":
		d.bootMode = schemas.LegacyBootSourceOverrideMode
	}
	if auth == "" || auth == "session" {
		sessions, err := d.offersSessions(ctx, httpc, endpoint)
		if err != nil {
			httpc.CloseIdleConnections()
			return nil, err
		}
		switch {
		case sessions:
			auth = "session"
		case auth == "session":
			httpc.CloseIdleConnections()
			return nil, proto.Errorf(proto.InvalidConfig, "the BMC at %s offers no Redfish sessions (its service root links no Sessions): set option auth to basic", host).WithPath("options.auth")
		default:
			d.log.Debug("the BMC offers no Redfish sessions: basic authentication")
			auth = "basic"
		}
	}
	d.password = cred.Password()
	d.client, err = gofish.ConnectContext(ctx, gofish.ClientConfig{
		Endpoint:          endpoint,
		Username:          cred.Username,
		Password:          cred.Password(),
		HTTPClient:        httpc,
		BasicAuth:         auth == "basic",
		ReuseConnections:  true,
		NoModifyTransport: true,
	})
	if err != nil {
		httpc.CloseIdleConnections()
		return nil, d.fail(ctx, "log in as "+cred.Username, err)
	}
	// A basic-auth login is only tried by the first request: make it now, and check
	// that option system names a system.
	if _, err := d.system(ctx); err != nil {
		d.Close()
		return nil, err
	}
	d.log.Debug("logged in", "auth", auth, "user", cred.Username)
	return d, nil
}

// offersSessions reads the service root, which a Redfish service serves without a login,
// and tells whether it links a session collection (Links.Sessions): a BMC without one
// (sushy-tools) authenticates every request by basic authentication.
func (d *driver) offersSessions(ctx context.Context, httpc *http.Client, endpoint string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/redfish/v1/", nil)
	if err != nil {
		return false, d.fail(ctx, "read the service root", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := httpc.Do(req)
	if err != nil {
		return false, d.fail(ctx, "read the service root", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body) // bounded by the transport
	if err != nil {
		return false, d.fail(ctx, "read the service root", err)
	}
	if resp.StatusCode != http.StatusOK {
		return false, proto.Errorf(proto.DriverError, "redfish %s: read the service root: HTTP %d: %s", d.host, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	var root struct {
		Links struct {
			Sessions struct {
				ID string `json:"@odata.id"`
			}
		}
	}
	if err := json.Unmarshal(body, &root); err != nil {
		return false, proto.Errorf(proto.DriverError, "redfish %s: the service root is not Redfish JSON: %v", d.host, err)
	}
	return root.Links.Sessions.ID != "", nil
}

// endpoint turns a binding's address into the service's base URL and its host.
func endpoint(address string) (string, string, error) {
	s := address
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", "", proto.Errorf(proto.InvalidConfig, "address %q is not a BMC's host, host:port or https://host[:port]", address).WithPath("address")
	}
	if strings.HasSuffix(u.Host, ":") {
		return "", "", proto.Errorf(proto.InvalidConfig, "address %q has an empty port", address).WithPath("address")
	}
	return "https://" + u.Host, u.Host, nil
}

// logoutTimeout bounds Close: a BMC that does not answer keeps its session until the
// session expires, not the caller.
const logoutTimeout = 15 * time.Second

// Close logs out of the session, if the driver opened one.
func (d *driver) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), logoutTimeout)
	defer cancel()
	d.client.WithContext(ctx).Logout()
	return nil
}

// system finds the machine's ComputerSystem: the one named by option system, or the
// service's only one. Every call reads it first, and every poll of the power state: it
// starts a read of the BMC, which the transport bounds (maxRead, maxMembers, maxPages).
func (d *driver) system(ctx context.Context) (*schemas.ComputerSystem, error) {
	d.reads.newRead()
	systems, err := d.client.WithContext(ctx).Service.Systems()
	if err != nil {
		return nil, d.fail(ctx, "list systems", err)
	}
	var ids []string
	for _, s := range systems {
		if s.ID == d.systemID || (d.systemID == "" && len(systems) == 1) {
			return s, nil
		}
		ids = append(ids, s.ID)
	}
	if d.systemID == "" {
		return nil, proto.Errorf(proto.InvalidConfig, "the BMC at %s has %d systems (%s): name one with option system", d.host, len(systems), strings.Join(ids, ", ")).WithPath("options.system")
	}
	return nil, proto.Errorf(proto.InvalidConfig, "the BMC at %s has no system %q; it has %s", d.host, d.systemID, strings.Join(ids, ", ")).WithPath("options.system")
}
