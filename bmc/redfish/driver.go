package redfish

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// Name is the driver's name in bindings and hardware profiles.
const Name = "redfish"

// The options a binding may give the driver.
const (
	// optSystem picks the ComputerSystem by Id when the service has several.
	optSystem = "system"
	// optAuth is session (a Redfish session, logged out by Close; the default) or basic.
	optAuth = "auth"
	// optCAFile names a PEM file of the CAs the BMC's certificate chains to.
	optCAFile = "caFile"
	// optTLSPin is the pin of the BMC's certificate key, sha256/BASE64 of its SPKI.
	optTLSPin = "tlsPin"
	// optBootMode is uefi or legacy, sent with every boot override; by default only
	// UEFI HTTP boot sends a mode (UEFI).
	optBootMode = "bootMode"
)

// driver is one BMC, logged in.
type driver struct {
	// host is the BMC's host[:port], for messages.
	host     string
	client   *gofish.APIClient
	systemID string
	bootMode schemas.BootSourceOverrideMode
	timing   bmc.Timing
	log      *slog.Logger
}

// Open checks cfg, resolves its credential and logs in to the Redfish service at
// cfg.Address (host, host:port or https://host[:port]).
func Open(ctx context.Context, cfg bmc.Config, env bmc.Env) (bmc.Driver, error) {
	o := cfg.Options
	if err := bmc.CheckOptions(o, optSystem, optAuth, optCAFile, optTLSPin, optBootMode, "powerTimeout", "pollInterval"); err != nil {
		return nil, err
	}
	endpoint, host, err := endpoint(cfg.Address)
	if err != nil {
		return nil, err
	}
	auth, err := bmc.ChoiceOption(o, optAuth, "session", "session", "basic")
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
	httpc, err := httpClient(o[optCAFile], o[optTLSPin])
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
	d := &driver{host: host, systemID: o[optSystem], timing: timing, log: env.Logger().With("bmc", host, "driver", Name)}
	switch mode {
	case "uefi":
		d.bootMode = schemas.UEFIBootSourceOverrideMode
	case "legacy":
		d.bootMode = schemas.LegacyBootSourceOverrideMode
	}
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
// service's only one.
func (d *driver) system(ctx context.Context) (*schemas.ComputerSystem, error) {
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
