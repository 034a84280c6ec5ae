package site

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// recorder is a tenant's own "BMC": an HTTPS server on 127.0.0.2 that records every
// request's Authorization header and body, answers the Redfish service root and
// refuses everything else (401).
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	seen []request
}

type request struct{ line, authorization, body string }

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{}
	r.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.seen = append(r.seen, request{req.Method + " " + req.URL.Path, req.Header.Get("Authorization"), string(body)})
		r.mu.Unlock()
		if req.URL.Path == "/redfish/v1/" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, serviceRoot)
			return
		}
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	}))
	l, err := net.Listen("tcp4", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	r.Listener.Close()
	r.Listener = l
	r.StartTLS()
	t.Cleanup(r.Close)
	return r
}

// serviceRoot is what the recorder answers at /redfish/v1/, so that a Redfish client
// goes on to log in.
const serviceRoot = `{"@odata.id": "/redfish/v1/", "Id": "RootService", "RedfishVersion": "1.6.0",
  "Systems": {"@odata.id": "/redfish/v1/Systems"}, "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
  "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}}`

// leaked returns the recorded requests that carried an Authorization header or the
// password.
func (r *recorder) leaked(password string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, req := range r.seen {
		if req.authorization != "" || strings.Contains(req.body, password) {
			out = append(out, fmt.Sprintf("%s authorization=%q body=%q", req.line, req.authorization, req.body))
		}
	}
	return out
}

// setPowerOnly is a one-step profile: power.setPower on the site agent.
const setPowerOnly = `{"id": "set-power", "version": 1, "target": "metal",
  "steps": [{"use": "power.setPower", "on": "site", "with": {"action": "on"}, "timeout": "1m"}]}`

// enroll enrolls a machine through the API with the credential config, its BMC trusted
// by pin: a tenant may set a driver's options, never its address or credential.
func enroll(t *testing.T, config string, req api.EnrollRequest, pin string) (store.Node, error) {
	t.Helper()
	opts := api.Binding{Driver: req.BMC.Driver, Config: []byte(`{"options": {"tlsPin": "` + pin + `", "auth": "basic", "pollInterval": "20ms"}}`)}
	req.Drivers = map[string]api.Binding{"power": opts, "management": opts, "virtual-media": opts}
	var node store.Node
	err := testkit.Client(t, config).Call(context.Background(), "metal.enroll", req, &node)
	return node, err
}

// waitNode waits until the node is in state, or failed, and returns it.
func waitNode(t *testing.T, config, id, state string) store.Node {
	t.Helper()
	var n store.Node
	waitFor(t, "node "+id+" "+state, func() bool {
		testkit.JSON(t, config, &n, "nodes", "get", id)
		return n.State == state || n.State == store.NodeFailed
	})
	if n.State != state {
		t.Fatalf("node %s is %s (%+v), want %s", id, n.State, n.Failure, state)
	}
	return n
}

// checkError fails unless err is the API error code at path (with reason, when given).
func checkError(t *testing.T, what string, err error, code proto.Code, path, reason string) {
	t.Helper()
	e := proto.AsError(err)
	if err == nil || e.Code != code || e.Details.Path != path || (reason != "" && e.Details.Reason != reason) {
		t.Errorf("%s: %v, want %s at %s %s", what, err, code, path, reason)
	}
}

// TestTenantCannotSendPlatformBMCCredentialAnywhere is the attack of a tenant that may
// manage nodes, through the real registry and `bcd site`: it enrolls a node whose BMC is
// its own HTTPS server (a loopback address the site admits) naming the platform's BMC
// credential, and runs power.setPower. Its server never sees a credential: the name
// resolves in the tenant's own secrets, the platform's form is the platform's to bind, a
// file is no credential reference, and an address outside the site's BMC networks is
// refused. The legitimate paths work: a credential the platform bound for the tenant,
// and the tenant's own; and no credential is ever stored in clear.
func TestTenantCannotSendPlatformBMCCredentialAnywhere(t *testing.T) {
	work, dataDir := t.TempDir(), t.TempDir()
	reg := testkit.StartRegistry(t, dataDir, "--agent-listen", "127.0.0.1:0")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "127.0.0.1/32")
	var site api.Site
	testkit.JSON(t, admin, &site, "sites", "update", "rack-a", "--bmc-networks", "127.0.0.1/32,127.0.0.2/32")
	if len(site.BMCNetworks) != 2 {
		t.Fatalf("sites update: %+v", site)
	}
	startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache")})
	putSecret(t, admin, work, "secret://rack-bmc", `{"username": "admin", "password": "hunter2"}`)

	testkit.JSON(t, admin, nil, "tenants", "create", "globex")
	globex := filepath.Join(work, "globex.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "globex", "--out", globex, "--actions",
		"compute:nodes:manage,compute:nodes:read,compute:pools:manage,compute:profiles:manage,compute:profiles:read,compute:secrets:manage")
	testkit.JSON(t, globex, nil, "pools", "create", "own", "--site", "rack-a")
	if e := testkit.Fails(t, globex, "sites", "update", "rack-a", "--bmc-networks", "0.0.0.0/0"); e.Code != "FORBIDDEN" {
		t.Errorf("a tenant widening the site's BMC networks: %+v", e)
	}
	testkit.JSON(t, globex, nil, "profiles", "create", writeDoc(t, work, setPowerOnly))

	// The attack: the platform's secret by its name, sent to the tenant's server.
	evil := newRecorder(t)
	evilPin, err := joinwire.Pin(evil.Certificate().PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	attack := func(mac, address, ref string) api.EnrollRequest {
		return api.EnrollRequest{Pool: "own", MACs: []string{mac}, BMC: api.BMC{Driver: "redfish", Address: address, CredentialRef: ref}}
	}
	node, err := enroll(t, globex, attack("52:54:00:66:00:01", evil.URL, "secret://rack-bmc"), evilPin)
	if err != nil {
		t.Fatalf("enrolling a node with its own BMC: %v", err)
	}
	// Its enrollment reads the BMC (power.getPower): the name resolves in the tenant's own
	// secrets, where there is none.
	if n := waitNode(t, globex, node.ID, store.NodeFailed); n.Failure == nil || n.Failure.Error.Code != proto.NotFound ||
		!strings.Contains(n.Failure.Error.Message, "tenant globex has no secret secret://rack-bmc") {
		t.Errorf("enrolling with another tenant's secret name: %s %+v", n.State, n.Failure)
	}
	_, err = enroll(t, globex, attack("52:54:00:66:00:02", evil.URL, "secret://platform/rack-bmc"), evilPin)
	checkError(t, "the platform's credential, bound by a tenant", err, proto.Forbidden, "bmc.credentialRef", "platform-credential")
	for _, ref := range []string{"/etc/shadow", "file:///etc/shadow", "secret://../root/rack-bmc"} {
		_, err = enroll(t, globex, attack("52:54:00:66:00:03", evil.URL, ref), evilPin)
		checkError(t, "credential reference "+ref, err, proto.InvalidInput, "bmc.credentialRef", "")
		if err != nil && strings.Contains(err.Error(), "root:") {
			t.Errorf("the refusal shows a file of the site host: %v", err)
		}
	}
	e := testkit.Fails(t, globex, "nodes", "enroll", "--pool", "own", "--mac", "52:54:00:66:00:04", "--bmc-driver", "redfish",
		"--bmc-address", "https://127.0.0.2", "--bmc-credential", "/etc/shadow")
	if e.Code != "INVALID_INPUT" || e.Details.Path != "bmc.credentialRef" {
		t.Errorf("nodes enroll --bmc-credential /etc/shadow: %+v", e)
	}
	for _, address := range []string{"https://127.0.0.3", "https://localhost:" + strings.Split(evil.URL, ":")[2], "unix:/run/docker.sock"} {
		_, err = enroll(t, globex, attack("52:54:00:66:00:05", address, "secret://rack-bmc"), evilPin)
		checkError(t, "BMC address "+address, err, proto.InvalidInput, "bmc.address", proto.ReasonBMCAddressNotAllowed)
	}
	redirect := attack("52:54:00:66:00:06", "https://127.0.0.1", "secret://rack-bmc")
	redirect.Drivers = map[string]api.Binding{"power": {Driver: "redfish", Config: []byte(`{"address": "` + evil.URL + `"}`)}}
	err = testkit.Client(t, globex).Call(context.Background(), "metal.enroll", redirect, &node)
	checkError(t, "a driver config naming another address", err, proto.InvalidInput, "drivers.power.config.address", "")
	shadow := strings.Replace(setPowerOnly, `"steps"`, `"drivers": {"power": {"driver": "redfish", "config": {"credentialRef": "/etc/shadow"}}}, "steps"`, 1)
	var check api.Validation
	if err := testkit.Client(t, globex).Call(context.Background(), "profiles.validate", api.ValidateProfileRequest{Document: api.Document(shadow)}, &check); err != nil ||
		check.Valid || len(check.Issues) != 1 || check.Issues[0].Path != "drivers.power.config.credentialRef" {
		t.Errorf("profiles.validate with a credential file in its drivers: %+v, %v", check, err)
	}
	if e := testkit.Fails(t, globex, "profiles", "create", writeDoc(t, work, shadow)); e.Code != "INVALID_INPUT" || e.Details.Path != "drivers.power.config.credentialRef" {
		t.Errorf("profiles create with a credential file in its drivers: %+v", e)
	}
	if leaked := evil.leaked("hunter2"); len(leaked) > 0 {
		t.Fatalf("the tenant's server received a BMC credential:\n%s", strings.Join(leaked, "\n"))
	}

	// The platform binds its credential to a BMC for the tenant; the tenant runs it.
	platformBMC := redfishsim.New(redfishsim.Config{Username: "admin", Password: "hunter2"})
	t.Cleanup(platformBMC.Close)
	pin, err := joinwire.Pin(platformBMC.Certificate.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	bound := attack("52:54:00:66:00:07", platformBMC.URL, "secret://platform/rack-bmc")
	bound.TenantID = "globex"
	if node, err = enroll(t, admin, bound, pin); err != nil {
		t.Fatalf("the platform binding its credential for the tenant: %v", err)
	}
	// Its enrollment reads the BMC with the platform's credential.
	waitNode(t, globex, node.ID, store.NodeReady)

	// The tenant moves that BMC to its own server: the platform's credential stays behind,
	// and only the platform binds it again; then the tenant's deploy, retried, powers the
	// machine on with it.
	var moved store.Node
	testkit.JSON(t, globex, &moved, "nodes", "update-bmc", node.ID, "--bmc-address", evil.URL)
	if moved.BMC.CredentialRef != "" || moved.PlatformBMC {
		t.Errorf("the tenant moved a BMC the platform bound and kept its credential: %+v, platform %v", moved.BMC, moved.PlatformBMC)
	}
	if e := testkit.Fails(t, globex, "nodes", "update-bmc", node.ID, "--bmc-credential", "secret://platform/rack-bmc"); e.Code != "FORBIDDEN" || e.Details.Path != "credentialRef" {
		t.Errorf("the tenant binding the platform's credential again: %+v", e)
	}
	if res := testkit.CLI(t, globex, "nodes", "deploy", node.ID, "--profile", "set-power", "--wait"); res.Code == 0 {
		t.Errorf("power.setPower on the moved BMC succeeded:\n%s", res.Stdout)
	}
	testkit.JSON(t, admin, &moved, "nodes", "update-bmc", node.ID, "--tenant", "globex", "--bmc-address", platformBMC.URL,
		"--bmc-credential", "secret://platform/rack-bmc")
	if res := testkit.CLI(t, globex, "nodes", "retry", node.ID, "--wait"); res.Code != 0 || !moved.PlatformBMC || platformBMC.PowerState() != "On" {
		t.Fatalf("power.setPower once the platform bound its credential again: %d, power %s\n%s%s", res.Code, platformBMC.PowerState(), res.Stdout, res.Stderr)
	}
	if leaked := evil.leaked("hunter2"); len(leaked) > 0 {
		t.Fatalf("the tenant's server received a BMC credential:\n%s", strings.Join(leaked, "\n"))
	}

	// The tenant's own BMC, with its own secret.
	ownBMC := redfishsim.New(redfishsim.Config{Username: "globex-admin", Password: "globex-pass"})
	t.Cleanup(ownBMC.Close)
	if pin, err = joinwire.Pin(ownBMC.Certificate.PublicKey); err != nil {
		t.Fatal(err)
	}
	putSecret(t, globex, work, "secret://bmc/own", `{"username": "globex-admin", "password": "globex-pass"}`)
	if node, err = enroll(t, globex, attack("52:54:00:66:00:08", ownBMC.URL, "secret://bmc/own"), pin); err != nil {
		t.Fatalf("enrolling the tenant's own BMC: %v", err)
	}
	waitNode(t, globex, node.ID, store.NodeReady)
	if res := testkit.CLI(t, globex, "nodes", "deploy", node.ID, "--profile", "set-power", "--wait"); res.Code != 0 || ownBMC.PowerState() != "On" {
		t.Fatalf("power.setPower with the tenant's own credential: %d, power %s\n%s%s", res.Code, ownBMC.PowerState(), res.Stdout, res.Stderr)
	}

	// Nothing the registry keeps holds a password in clear: commands are stored without
	// their credential, secrets sealed.
	filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err == nil && (bytes.Contains(data, []byte("hunter2")) || bytes.Contains(data, []byte("globex-pass"))) {
			t.Errorf("%s holds a BMC password in clear", path)
		}
		return nil
	})
}
