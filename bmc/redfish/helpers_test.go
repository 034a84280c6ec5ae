package redfish

import (
	"context"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
)

const (
	user     = "operator"
	password = "s3cret-Pa55"
)

// newSim starts a simulated BMC with the test login.
func newSim(t *testing.T, cfg redfishsim.Config) *redfishsim.Server {
	t.Helper()
	cfg.Username, cfg.Password = user, password
	sim := redfishsim.New(cfg)
	t.Cleanup(sim.Close)
	return sim
}

// credentialRef is the reference the test credential is attached under.
const credentialRef bmc.CredentialRef = "secret://rack-1/bmc"

// credentials is the test login, attached as the site attaches a command's credential.
var credentials = attached(password)

func attached(pass string) bmc.Attached {
	return bmc.Attached{Ref: credentialRef, Credential: bmc.NewCredential(user, pass)}
}

// config binds the simulated BMC, trusted by its key's pin, with fast polling.
func config(t testing.TB, sim *redfishsim.Server) bmc.Config {
	t.Helper()
	return pinned(t, strings.TrimPrefix(sim.URL, "https://"), sim.Certificate.PublicKey, "10ms", "5s")
}

// pinned binds the BMC at address, trusted by its key's pin, polling as given.
func pinned(t testing.TB, address string, key any, pollInterval, powerTimeout string) bmc.Config {
	t.Helper()
	pin, err := joinwire.Pin(key)
	if err != nil {
		t.Fatal(err)
	}
	return bmc.Config{
		Address:       address,
		CredentialRef: credentialRef,
		Options:       map[string]string{optTLSPin: pin, "pollInterval": pollInterval, "powerTimeout": powerTimeout},
	}
}

// open opens the driver on cfg with the simulator's login.
func open(t *testing.T, cfg bmc.Config) bmc.Driver {
	t.Helper()
	return openAs(t, cfg, credentials)
}

// openAs opens the driver on cfg with a login and closes it when the test ends.
func openAs(t *testing.T, cfg bmc.Config, login bmc.Attached) bmc.Driver {
	t.Helper()
	d, err := Open(context.Background(), cfg, bmc.Env{Credentials: login})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// checkErr fails unless err is nil when code is empty, or has code and contains text.
func checkErr(t *testing.T, err error, code proto.Code, text string) {
	t.Helper()
	switch {
	case code == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case code == "":
	case err == nil:
		t.Fatalf("no error, want %s", code)
	case proto.CodeOf(err) != code || !strings.Contains(err.Error(), text):
		t.Fatalf("error %v, want %s containing %q", err, code, text)
	}
}
