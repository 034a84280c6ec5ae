package main_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/testkit"
)

// stranger calls the registry from a loopback address of its own, knowing nothing but
// what anyone may fetch: the well-known document.
type stranger struct {
	reg     *testkit.Registry
	client  *http.Client
	anchors joinwire.Anchors
}

func newStranger(t *testing.T, reg *testkit.Registry, local string) stranger {
	t.Helper()
	anchors, err := joinwire.ParseWellKnown(fetchDocument(t, reg))
	if err != nil {
		t.Fatal(err)
	}
	return stranger{reg: reg, client: &http.Client{Transport: transportFrom(t, reg, local)}, anchors: anchors}
}

// madeUpJoin posts a join as node with a join token nobody minted, in the shape of a real
// one and sealed to the registry's published key as bcd seals, so that the registry
// opens it and looks it up. It returns the status, the Retry-After header and the error
// answered.
func (s stranger) madeUpJoin(t *testing.T, node string) (int, string, proto.Error) {
	id, secret := make([]byte, 8), make([]byte, 32)
	rand.Read(id)
	rand.Read(secret)
	token := "bcj_" + hex.EncodeToString(id) + "." + base64.RawURLEncoding.EncodeToString(secret)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	spki, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Error(err)
	}
	sealed, err := joinwire.SealToken(s.anchors.JoinEncryptionKey, joinwire.AAD(node, joinwire.RoleNode, spki), token)
	if err != nil {
		t.Error(err)
	}
	body, _ := json.Marshal(joinwire.Request{NodeID: node, Role: joinwire.RoleNode,
		PublicKey: base64.StdEncoding.EncodeToString(spki), SealedToken: base64.StdEncoding.EncodeToString(sealed)})
	return s.post(t, joinwire.JoinMethod, "", body)
}

// post posts body to method, with bearer as its credential when set.
func (s stranger) post(t *testing.T, method, bearer string, body []byte) (int, string, proto.Error) {
	var e proto.Error
	req, _ := http.NewRequest(http.MethodPost, s.reg.URL+"/v1/"+method, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Error(err) // not Fatal: called from goroutines of their own
		return 0, "", e
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		json.Unmarshal(data, &e)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), e
}

// refusedForSource reports whether an answer is the refusal of a source over its bound of
// failed checks, with a Retry-After of 1 to most seconds, naming the source.
func refusedForSource(status int, retry string, e proto.Error, source string, most int) bool {
	seconds, err := strconv.Atoi(retry)
	return status == http.StatusServiceUnavailable && e.Code == proto.Unavailable && e.Details.Reason == proto.ReasonSourceFailures &&
		err == nil && seconds >= 1 && seconds <= most && strings.Contains(e.Message, source)
}

// TestAStrangersMadeUpJoinTokensAreRefusedBeforeTheCheck, as the attacker through the
// real serve: a stranger on 127.0.0.2 posting made-up join tokens, sealed to the
// registry's published key so that each is opened and looked up, has its burst of
// refused tokens, then 40 joins at once are refused UNAVAILABLE (source-failures) with
// Retry-After, and so is its bearer call (the same bucket); the registry's count of join
// token checks stops at the burst. Meanwhile a real bcd join from 127.0.0.1 with a
// valid token joins. Before the bound every made-up token was checked and answered
// UNAUTHENTICATED.
func TestAStrangersMadeUpJoinTokensAreRefusedBeforeTheCheck(t *testing.T) {
	const burst = 5
	reg := testkit.StartRegistry(t, "", "--metrics-listen", "127.0.0.1:0", "--auth-failure-burst", strconv.Itoa(burst), "--auth-failure-refill", "1h")
	testkit.JSON(t, reg.AdminConfig, nil, "sites", "create", "rack-a")
	attacker := newStranger(t, reg, "127.0.0.2")
	for i := range burst {
		if status, _, e := attacker.madeUpJoin(t, fmt.Sprintf("stranger-%d", i)); status != http.StatusUnauthorized || e.Details.Reason != proto.ReasonTokenInvalid {
			t.Fatalf("made-up token %d, within the burst: %d %+v", i+1, status, e)
		}
	}
	var flood sync.WaitGroup
	for i := range 40 {
		flood.Go(func() {
			if status, retry, e := attacker.madeUpJoin(t, fmt.Sprintf("flood-%d", i)); !refusedForSource(status, retry, e, "127.0.0.2", 3600) {
				t.Errorf("a made-up token beyond the burst: %d, Retry-After %q, %+v", status, retry, e)
			}
		})
	}
	j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "node-1", "--site", "rack-a"))
	if res := testkit.BCD(t, j.args(reg.URL, "node-1", "node", reg.Pins)...); res.Code != 0 {
		t.Errorf("bcd join from 127.0.0.1 during the flood: exit %d\n%s", res.Code, res.Stderr)
	}
	flood.Wait()
	if status, retry, e := attacker.post(t, "credentials.whoami", "bcc_0123456789abcdef.bWFkZS11cA", []byte("{}")); !refusedForSource(status, retry, e, "127.0.0.2", 3600) {
		t.Errorf("a made-up bearer credential from there: %d, Retry-After %q, %+v", status, retry, e)
	}
	samples, text := testkit.Scrape(t, reg.MetricsURL)
	for series, want := range map[string]float64{
		`better_compute_api_credential_checks_total{credential="join-token",result="failed"}`: burst,
		`better_compute_api_credential_checks_total{credential="join-token",result="valid"}`:  1,
		`better_compute_api_source_refused_total{credential="join-token"}`:                    40,
		`better_compute_api_source_refused_total{credential="bearer"}`:                        1,
	} {
		if got := samples[series]; got != want {
			t.Errorf("%s %v, want %v\n%s", series, got, want, text)
		}
	}
	if !strings.Contains(reg.Stderr.String(), "source=127.0.0.2") {
		t.Errorf("the registry's log does not name the refused source:\n%s", reg.Stderr)
	}
}

// TestJoinWaitsOutItsAddressesBound: machines behind one NAT address share its bound. A
// stranger behind it spends the address's last failed check just before a real bcd
// join's request passes the NAT, which the registry then refuses source-failures with
// Retry-After before opening its token; bcd join waits the Retry-After, saying so on its stderr
// (the attempt, the seconds, the reason and that it will send it again), sends it again,
// and joins with its token, which the refusal left unspent. Before, the wait was silent.
func TestJoinWaitsOutItsAddressesBound(t *testing.T) {
	reg := testkit.StartRegistry(t, "", "--auth-failure-burst", "1", "--auth-failure-refill", "1s")
	testkit.JSON(t, reg.AdminConfig, nil, "sites", "create", "rack-a")
	const nat = "127.0.0.3"
	behind := newStranger(t, reg, nat)
	var mu sync.Mutex
	var answers []string
	u := front(t, reg, nat, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if r.URL.Path != "/v1/"+joinwire.JoinMethod {
			next.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if len(answers) == 0 {
			if status, _, e := behind.madeUpJoin(t, "stranger"); status != http.StatusUnauthorized {
				t.Errorf("the stranger's made-up token, the address's one failure: %d %+v", status, e)
			}
		}
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		var e proto.Error
		json.Unmarshal(rec.body.Bytes(), &e)
		answers = append(answers, strings.TrimSpace(fmt.Sprintf("%d %s %s", rec.status, rec.Header().Get("Retry-After"), e.Details.Reason)))
	})
	j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "node-1", "--site", "rack-a"))
	res := testkit.BCD(t, j.args(u, "node-1", "node", reg.Pins)...)
	if res.Code != 0 {
		t.Fatalf("bcd join behind the NAT: exit %d\n%s", res.Code, res.Stderr)
	}
	wait := regexp.MustCompile(`level=INFO msg="the registry refused the join for now: bcd join waits, then sends it again" attempt=1 of=21 waitSeconds=1 code=UNAVAILABLE reason=` +
		proto.ReasonSourceFailures + ` message="too many failed credential checks came from ` + nat + `[^"]*" todo="nothing: the token is unspent`)
	if !wait.MatchString(res.Stderr) {
		t.Errorf("bcd join's stderr does not tell its wait:\n%s", res.Stderr)
	}
	if got := strings.Join(answers, ", "); got != "503 1 "+proto.ReasonSourceFailures+", 200" {
		t.Errorf("the join requests were answered %q, want refused source-failures with Retry-After: 1, then admitted", got)
	}
	if _, err := bcdconf.Load(j.configDir); err != nil {
		t.Errorf("after the join: %v", err)
	}
	if _, err := os.Stat(j.tokenFile); !os.IsNotExist(err) {
		t.Errorf("token file after the join: %v, want it removed", err)
	}
}

// recorder notes the status and the body a handler answers with.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.body.Write(p)
	return r.ResponseWriter.Write(p)
}
