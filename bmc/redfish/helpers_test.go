package redfish

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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

// credentialFile writes a credential file and returns its reference.
func credentialFile(t *testing.T, username, pass string) bmc.CredentialRef {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bmc.json")
	data, _ := json.Marshal(map[string]string{"username": username, "password": pass})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return bmc.CredentialRef(path)
}

// config binds the simulated BMC, trusted by its key's pin, with fast polling.
func config(t *testing.T, sim *redfishsim.Server) bmc.Config {
	t.Helper()
	pin, err := joinwire.Pin(sim.Certificate.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return bmc.Config{
		Address:       strings.TrimPrefix(sim.URL, "https://"),
		CredentialRef: credentialFile(t, user, password),
		Options:       map[string]string{optTLSPin: pin, "pollInterval": "10ms", "powerTimeout": "5s"},
	}
}

// open opens the driver on cfg and closes it when the test ends.
func open(t *testing.T, cfg bmc.Config) bmc.Driver {
	t.Helper()
	d, err := Open(context.Background(), cfg, bmc.Env{Credentials: bmc.FileCredentials{}})
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
