package cli_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// tenantWaiting is the serve flag the tests give: the calls one tenant may have waiting.
const tenantWaiting = 4

// rawCaller sends API calls with a CLI config's credential as a program of the tenant's
// would, not through the CLI (which sends refused calls again).
type rawCaller struct {
	cfg  api.ClientConfig
	http *http.Client
}

func newRawCaller(t *testing.T, config string) rawCaller {
	t.Helper()
	cfg, err := api.LoadClientConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(cfg.ServingCA))
	return rawCaller{cfg, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}}}}
}

// call posts body to method, and returns the status, the Retry-After header and the
// error answered.
func (c rawCaller) call(t *testing.T, method string, body io.Reader) (int, string, proto.Error) {
	req, err := http.NewRequest(http.MethodPost, c.cfg.Server+"/v1/"+method, body)
	if err != nil {
		t.Error(err)
		return 0, "", proto.Error{}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.cfg.Credential)
	resp, err := c.http.Do(req)
	if err != nil {
		t.Error(err)
		return 0, "", proto.Error{}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var e proto.Error
	if resp.StatusCode != http.StatusOK {
		json.Unmarshal(data, &e)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), e
}

// refused reports whether an answer is the refusal of a call beyond its tenant's bounds.
func refused(status int, retry string, e proto.Error) bool {
	return status == http.StatusServiceUnavailable && e.Code == proto.Unavailable && e.Details.Reason == proto.ReasonTenantBusy && retry == "1"
}

// holdWaiting takes every waiting place of the caller's tenant with calls whose bodies do
// not come, until the one returned sends them; each is then answered OK. A held call
// refused because the probe that looks for the refusal took its place first (the probe
// can reach the registry before the last held call does) is sent again with a new body.
func (c rawCaller) holdWaiting(t *testing.T) (send func()) {
	t.Helper()
	var held sync.WaitGroup
	var mu sync.Mutex
	bodies := make([]*io.PipeWriter, tenantWaiting)
	sent := false
	for i := range tenantWaiting {
		held.Go(func() {
			for {
				r, w := io.Pipe()
				mu.Lock()
				if sent {
					mu.Unlock()
					return
				}
				bodies[i] = w
				mu.Unlock()
				status, retry, e := c.call(t, "credentials.whoami", r)
				r.Close() // a send to a refused call's body fails rather than waits
				mu.Lock()
				again := refused(status, retry, e) && !sent
				mu.Unlock()
				if again {
					continue
				}
				if status != http.StatusOK {
					t.Errorf("a call whose body came late: %d %+v", status, e)
				}
				return
			}
		})
	}
	testkit.WaitFor(t, "the tenant's calls to be refused while its waiting places are held", time.Minute, 20*time.Millisecond, func() bool {
		return refused(c.call(t, "credentials.whoami", strings.NewReader("{}")))
	})
	return func() {
		mu.Lock()
		sent = true
		for _, w := range bodies {
			w.Write([]byte("{}"))
			w.Close()
		}
		mu.Unlock()
		held.Wait()
	}
}

// TestAFloodingTenantIsRefusedNotTheOthers, as the attacker through the real serve: beta
// holds all its waiting places and floods the registry with many more concurrent calls;
// every one of them is refused UNAVAILABLE (tenant-busy) with Retry-After, while each of
// acme's calls, made during the flood, is answered. Once beta's held calls are sent,
// they are answered too, and beta's calls are served again.
func TestAFloodingTenantIsRefusedNotTheOthers(t *testing.T) {
	reg := testkit.StartRegistry(t, "", "--api-tenant-waiting", "4")
	configs := acmeAndBeta(t, reg.AdminConfig, "compute:nodes:read")
	beta := newRawCaller(t, configs["beta"])
	send := beta.holdWaiting(t)

	var flood, acme sync.WaitGroup
	for range 200 {
		flood.Go(func() {
			if status, retry, e := beta.call(t, "metal.list", strings.NewReader("{}")); !refused(status, retry, e) {
				t.Errorf("beta's call beyond its bound: %d, Retry-After %q, %+v", status, retry, e)
			}
		})
	}
	for range 3 {
		acme.Go(func() {
			if res := testkit.CLI(t, configs["acme"], "nodes", "list", "--format", "json"); res.Code != 0 || strings.Contains(res.Stderr, proto.ReasonTenantBusy) {
				t.Errorf("acme's call during beta's flood: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
			}
		})
	}
	flood.Wait()
	acme.Wait()
	send()
	if status, _, e := beta.call(t, "metal.list", strings.NewReader("{}")); status != http.StatusOK {
		t.Errorf("beta's call once its held ones were answered: %d %+v", status, e)
	}
}

// TestTheCLISendsARefusedCallAgain: a CLI call refused because its tenant's waiting
// places are all held logs that it waits, is sent again, and succeeds once the places
// free up; its JSON output is the call's answer alone.
func TestTheCLISendsARefusedCallAgain(t *testing.T) {
	reg := testkit.StartRegistry(t, "", "--api-tenant-waiting", "4")
	configs := acmeAndBeta(t, reg.AdminConfig, "compute:nodes:read")
	send := newRawCaller(t, configs["beta"]).holdWaiting(t)

	cmd := exec.Command(testkit.Binary(t, "better-compute"), "nodes", "list", "--format", "json")
	cmd.Env = append(cmd.Environ(), "BC_CONFIG="+configs["beta"])
	var stdout bytes.Buffer
	stderr := &testkit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the CLI to log that it waits to send its call again", time.Minute, 20*time.Millisecond, func() bool {
		return strings.Contains(stderr.String(), "reason="+proto.ReasonTenantBusy)
	})
	send()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the CLI's call once the registry freed up: %v\n%s%s", err, &stdout, stderr)
	}
	var list api.NodeList
	if err := json.Unmarshal(stdout.Bytes(), &list); err != nil || list.Nodes == nil {
		t.Errorf("the CLI's JSON output: %v\n%s", err, &stdout)
	}
	if !strings.Contains(stderr.String(), "method=metal.list") {
		t.Errorf("the CLI's log names not the call it sends again:\n%s", stderr)
	}
}

// TestServeRefusesANegativeAPILimit: a negative bound (of the API calls, of what a tenant holds) is INVALID_INPUT at its flag, before
// anything starts; 0 is the default.
func TestServeRefusesANegativeAPILimit(t *testing.T) {
	for _, flag := range []string{"--api-running", "--api-tenant-waiting", "--api-tenant-watching", "--tenant-secrets", "--tenant-images", "--tenant-profile-versions"} {
		res := testkit.CLI(t, "", "serve", "--data-dir", t.TempDir(), flag, "-1", "--format", "json")
		var e testkit.ErrorObject
		json.Unmarshal([]byte(res.Stdout), &e)
		if res.Code != 1 || e.Code != string(proto.InvalidInput) || e.Details.Path != flag {
			t.Errorf("serve %s -1: exit %d\n%s%s", flag, res.Code, res.Stdout, res.Stderr)
		}
	}
}

// TestARefusalTheCLIGaveUpOnSaysWhen: a CLI call refused every time it is sent (its
// tenant's waiting places held throughout) exits 1 with the refusal, and says the seconds
// the registry's last answer asked to wait: retryAfterSeconds with --format json, a
// "retry after" line in text, so a script or an operator knows when to try again.
func TestARefusalTheCLIGaveUpOnSaysWhen(t *testing.T) {
	reg := testkit.StartRegistry(t, "", "--api-tenant-waiting", "4")
	configs := acmeAndBeta(t, reg.AdminConfig, "compute:nodes:read")
	send := newRawCaller(t, configs["beta"]).holdWaiting(t)
	defer send()

	res := testkit.CLI(t, configs["beta"], "nodes", "list", "--format", "json")
	var e struct {
		testkit.ErrorObject
		RetryAfterSeconds *int `json:"retryAfterSeconds"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &e); err != nil || res.Code != 1 || e.Code != string(proto.Unavailable) ||
		e.Details.Reason != proto.ReasonTenantBusy || e.RetryAfterSeconds == nil || *e.RetryAfterSeconds != 1 {
		t.Errorf("a call refused for now each time, as JSON: exit %d, %v\n%s%s", res.Code, err, res.Stdout, res.Stderr)
	}
	res = testkit.CLI(t, configs["beta"], "nodes", "list")
	if res.Code != 1 || !strings.Contains(res.Stderr, "  retry after: 1s\n") {
		t.Errorf("a call refused for now each time, as text: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}
