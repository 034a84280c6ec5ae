package deploy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/join"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// stolen is what another host got by joining with a machine's token.
type stolen struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	payload joinwire.Payload
	anchors joinwire.Anchors
}

// joinFrom joins the registry at url as node's agent of role with token, from the local
// address local, as a host that read the token would: it trusts whatever the
// registry's well-known document says (it has no pins, and needs none to join) and
// returns what the join got it.
func joinFrom(t *testing.T, url, local, node, role, token string) stolen {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext:     (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}).DialContext,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	res, err := client.Get(url + joinwire.WellKnownPath)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := io.ReadAll(res.Body)
	res.Body.Close()
	anchors, err := joinwire.ParseWellKnown(doc)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	spki, _ := x509.MarshalPKIXPublicKey(key.Public())
	sealed, err := joinwire.SealToken(anchors.JoinEncryptionKey, joinwire.AAD(node, role, spki), token)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(joinwire.Request{NodeID: node, Role: role,
		PublicKey: base64.StdEncoding.EncodeToString(spki), SealedToken: base64.StdEncoding.EncodeToString(sealed)})
	res, err = client.Post(url+"/v1/"+joinwire.JoinMethod, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var resp joinwire.Response
	if err := json.Unmarshal(answer, &resp); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("the join from %s: status %d: %s", local, res.StatusCode, answer)
	}
	payload, err := joinwire.VerifyResponse(anchors.JoinSigningKey, resp)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode([]byte(payload.Certificate))
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return stolen{cert: cert, key: key, payload: payload, anchors: anchors}
}

// configDir writes what the join got into a bcd configuration directory (agent/bcdconf)
// for the registry at server with pins, as bcd join writes it, and returns it: bcd node
// runs with it.
func (s stolen) configDir(t *testing.T, server string, pins joinwire.Pins) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "etc-bcd")
	if _, err := join.WriteBundle(dir, server, pins, s.anchors, s.key, s.payload); err != nil {
		t.Fatal(err)
	}
	return dir
}

// nodeEvents is node's event log.
func nodeEvents(t *testing.T, admin, node string) []api.Event {
	var list api.EventList
	testkit.JSON(t, admin, &list, "nodes", "events", node)
	return list.Events
}

// TestRamdiskTokenReadByAnotherHost: another host on the provisioning network reads a
// machine's boot script as the machine powers on into it and joins first, from
// 127.0.0.2, as the node's ramdisk with the script's token; the machine's real bcd
// ramdisk presents the token again from 127.0.0.1 and is refused token-used. The node's
// events name both addresses and what to do, the metric counts one reuse from another
// address, and the registry contains it: the node's identity epoch moved past the one
// the other host's certificate names (so that certificate is refused,
// TestEarlierRamdiskCertificatesStopWorking), the node's unused join tokens (the
// provisioned token deploy.image would carry) are deleted, and the deploy failed
// FORBIDDEN token-reused. Before, nothing but the machine's refusal happened.
func TestRamdiskTokenReadByAnotherHost(t *testing.T) {
	w, raw := hostWorld(t)
	id, m := w.readyMachine(t, "52:54:00:12:38:01", "4c4c4544-0042-3510-8052-b4c04f5958c1", len(raw))
	stolen := make(chan *x509.Certificate, 1)
	w.site.mu.Lock()
	w.site.beforeRamdisk = func(node string, entry proto.PrepareRamdisk) {
		if node == id && len(stolen) == 0 {
			stolen <- joinFrom(t, entry.Registry, "127.0.0.2", node, joinwire.RoleRamdisk, entry.Token).cert
		}
	}
	w.site.mu.Unlock()
	before, _ := testkit.Scrape(t, w.reg.MetricsURL)
	var started api.DeployStarted
	testkit.JSON(t, w.admin, &started, "nodes", "deploy", id, "--profile", "e2e-host")
	n := waitState(t, w.admin, id, store.NodeFailed)
	console, told := consoleTells(t, m, "token-used")
	if n.Failure == nil || n.Failure.Error == nil || n.Failure.Error.Code != proto.Forbidden || n.Failure.Error.Details.Reason != proto.ReasonTokenReused {
		t.Fatalf("the deploy failed with %+v, want FORBIDDEN token-reused; console:\n%s", n.Failure, console)
	}
	if !told {
		t.Errorf("the machine's ramdisk was not refused token-used; console:\n%s", console)
	}

	e := w.toldAndContained(t, id, store.TokenRamdisk, started.WorkflowID, before, <-stolen)
	if e.WorkflowID != started.WorkflowID || e.Error == nil || e.Error.Details.Reason != proto.ReasonTokenReused {
		t.Errorf("token.reused event %+v, want it failing workflow %s token-reused", e, started.WorkflowID)
	}
	if !strings.Contains(e.Detail, "Another host may have read") {
		t.Errorf("the event's detail does not say another host may have read the token: %s", e.Detail)
	}
}

// toldAndContained checks what a node's token of kind, joined with first from
// 127.0.0.2 by another host that got cert, presented again from 127.0.0.1, left: one
// token.reused event from the one to the other that says what the registry did and what
// to do (returned), one reuse from another address more than before in the metric, the
// node's identity epoch past the one cert names (so it is refused), no unused join
// token of the node, and the token joined with first naming minter, the deploy, as the
// workflow that minted it (tokens list).
func (w *world) toldAndContained(t *testing.T, id, kind, minter string, before map[string]float64, cert *x509.Certificate) api.Event {
	t.Helper()
	var reused []api.Event
	for _, e := range nodeEvents(t, w.admin, id) {
		if e.Kind == store.EventTokenReused {
			reused = append(reused, e)
		}
	}
	if len(reused) != 1 {
		t.Fatalf("token.reused events %+v, want one", reused)
	}
	e := reused[0]
	if e.From != "127.0.0.2" || e.To != "127.0.0.1" {
		t.Errorf("token.reused event %+v, want from 127.0.0.2 to 127.0.0.1", e)
	}
	for _, says := range []string{"The " + kind + " join token", "127.0.0.2", "127.0.0.1", "policy.measuredBoot", "moved the node's identity epoch"} {
		if !strings.Contains(e.Detail, says) {
			t.Errorf("the event's detail does not say %q: %s", says, e.Detail)
		}
	}

	after, _ := testkit.Scrape(t, w.reg.MetricsURL)
	series := `better_compute_join_token_reused_total{address="other",kind="` + kind + `"}`
	if got := after[series] - before[series]; got != 1 {
		t.Errorf("%s moved by %v, want 1", series, got)
	}

	epoch, err := proto.IdentityEpoch(cert)
	if err != nil {
		t.Fatal(err)
	}
	var v api.NodeView
	testkit.JSON(t, w.admin, &v, "nodes", "get", id)
	if v.IdentityEpoch <= epoch {
		t.Errorf("the node's identity epoch is %d, the other host's certificate names %d: it still works", v.IdentityEpoch, epoch)
	}
	var tokens api.TokenList
	testkit.JSON(t, w.admin, &tokens, "tokens", "list")
	var joined []string
	for _, tok := range tokens.Tokens {
		if tok.NodeID == id && tok.UsedAt.IsZero() {
			t.Errorf("the node's unused %s token %s is left", tok.Kind, tok.ID)
		}
		if tok.NodeID == id && tok.Kind == kind && tok.UsedFrom == "127.0.0.2" {
			joined = append(joined, tok.Workflow)
		}
	}
	if len(joined) != 1 || joined[0] != minter {
		t.Errorf("tokens list shows the %s token joined with from 127.0.0.2 minted by workflows %q, want one by %s", kind, joined, minter)
	}
	return e
}

// TestProvisionedTokenReadByAnotherHost: another host that holds a machine's next
// installation's user data (a host that joined first as its ramdisk is sent them with
// deploy.image; here read where the machine's first boot keeps its token) joins with its
// provisioned token first, from 127.0.0.2, as the node's installed OS, while the machine
// boots its new OS slowly: its bcd node holds the node's identity (the deploy takes it
// for the machine's rejoin) and applies the node's NodeSpec. The machine's own first
// boot's bcd join presents the token again from 127.0.0.1 and is refused token-used. The
// node's events name both addresses and what to do, the metric counts one provisioned
// reuse from another address, tokens list shows the join's address, and the registry
// contains it, though no workflow runs any more: the node's identity epoch moved past
// the one the other host's certificate names, so that host's bcd node is let go and
// refused for good, and the node's unused join tokens are deleted. Before, nothing but
// the machine's refusal happened, and the other host kept the node.
func TestProvisionedTokenReadByAnotherHost(t *testing.T) {
	w, raw := hostWorld(t)
	id, m := w.readyMachine(t, "52:54:00:12:38:02", "4c4c4544-0042-3510-8052-b4c04f5958c2", len(raw))
	slowBoot := filepath.Join(t.TempDir(), "boot-on")
	m.env = append(m.env, envJoinAfter+"="+slowBoot)
	before, _ := testkit.Scrape(t, w.reg.MetricsURL)
	var started api.DeployStarted
	testkit.JSON(t, w.admin, &started, "nodes", "deploy", id, "--profile", "e2e-host")

	var tokenFile string
	if !waitFor(t, 2*time.Minute, func() bool {
		files, _ := filepath.Glob(filepath.Join(m.dir, "os-*", "join-token"))
		if len(files) > 0 {
			tokenFile = files[0]
		}
		return tokenFile != ""
	}) {
		t.Fatalf("the machine never booted its new OS")
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	other := joinFrom(t, w.reg.URL, "127.0.0.2", id, joinwire.RoleNode, string(token))
	otherLogs, stop := runNode(t, other.configDir(t, w.reg.URL, w.reg.Pins))
	defer stop()
	waitState(t, w.admin, id, store.NodeActive)
	if !waitFor(t, 30*time.Second, func() bool {
		var v api.NodeView
		testkit.JSON(t, w.admin, &v, "nodes", "get", id)
		return v.Agent != nil && v.Agent.DesiredGeneration >= 1 && v.Agent.ObservedGeneration == v.Agent.DesiredGeneration
	}) {
		t.Fatalf("the other host's bcd node never applied the node's NodeSpec:\n%s", otherLogs.String())
	}

	if err := os.WriteFile(slowBoot, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !waitFor(t, 30*time.Second, func() bool { return refusedForGood(otherLogs, "earlier installation") }) {
		t.Errorf("the other host's bcd node was not let go and refused for good:\n%s", otherLogs.String())
	}
	if console, told := consoleTells(t, m, "token-used"); !told {
		t.Errorf("the machine's bcd join was not refused token-used; console:\n%s", console)
	}

	e := w.toldAndContained(t, id, store.TokenProvisioned, started.WorkflowID, before, other.cert)
	if e.WorkflowID != "" || e.Error != nil {
		t.Errorf("token.reused event %+v, want it failing no workflow (the deploy took the other host's join)", e)
	}
	if !strings.Contains(e.Detail, "joined as this node's installed OS first") {
		t.Errorf("the event's detail does not say another host may have joined as the installed OS: %s", e.Detail)
	}
	if res := testkit.CLI(t, w.admin, "tokens", "list"); !strings.Contains(res.Stdout, "127.0.0.2") {
		t.Errorf("tokens list does not show the address of the provisioned token's join:\n%s", res.Stdout)
	}
}

// consoleTells waits for the machine's console to show what: the machine's agent logs its
// refusal once it has the answer, which may be after the registry acted on it.
func consoleTells(t *testing.T, m *machine, what string) (string, bool) {
	var console string
	told := waitFor(t, 30*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
		console = string(b)
		return strings.Contains(console, what)
	})
	return console, told
}
