package console_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/console"
	"github.com/better-compute/better-compute/testkit"
)

// from makes b's connections come from the loopback address local.
func (b *client) from(local string) *client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	b.client.Transport.(*http.Transport).DialContext = dialer.DialContext
	return b
}

// whoami calls the API's credentials.whoami with secret and body over b's connections,
// and returns the status and Retry-After of its answer; status 0 when it had none.
func (b *client) whoami(secret string, body io.Reader) (int, string) {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, b.base+"/v1/credentials.whoami", body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Error(err)
		return 0, ""
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// holdWaiting takes the one waiting place secret's tenant has (serve --api-tenant-waiting
// 1) with a call whose body does not come, until release sends it; the call is then
// answered OK. It knows it holds the place once another call of the tenant is refused.
// A probing call that reached the registry first holds the place for a moment itself,
// and the call meant to hold it is then refused and answered at once: it is sent again.
func (b *client) holdWaiting(secret string) (release func()) {
	b.t.Helper()
	deadline := time.Now().Add(time.Minute) // a guard against a hang, not a measure
	for {
		body, send := io.Pipe()
		answered := make(chan int, 1)
		go func() {
			status, _ := b.whoami(secret, body)
			answered <- status
		}()
		if b.refusedWhileHeld(secret, answered, deadline) {
			return func() {
				send.Write([]byte("{}"))
				send.Close()
				if status := <-answered; status != http.StatusOK {
					b.t.Errorf("the held call once its body came: %d", status)
				}
			}
		}
		send.Close()
	}
}

// refusedWhileHeld probes with calls of secret's tenant until one is refused for now
// (true: the held call holds the waiting place), or until the held call is answered,
// refused itself (false). It fails the test past deadline.
func (b *client) refusedWhileHeld(secret string, answered <-chan int, deadline time.Time) bool {
	b.t.Helper()
	for {
		select {
		case <-answered:
			return false
		default:
		}
		if status, retry := b.whoami(secret, strings.NewReader("{}")); status == http.StatusServiceUnavailable && retry != "" {
			return true
		}
		if time.Now().After(deadline) {
			b.t.Fatal("timed out after 1m0s waiting for the tenant's calls to be refused while its waiting place is held")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSignInIsBoundedByTheSourceAsTheAPIIs, as the attacker through the real serve: the
// console's sign-ins and the API's calls from one address share its bucket of failed
// credential checks. A stranger on 127.0.0.2 spends two of its three on the API and the
// last on a sign-in; its next sign-ins, a made-up secret and the admin credential alike,
// are refused UNAVAILABLE on the sign-in page, saying why and when to try again, in its
// text and in its Retry-After header (as the API's answer does), and make no session; its
// API calls are refused too. The operator on 127.0.0.1 signs in. Before the bound every
// sign-in was checked and refused UNAUTHENTICATED; before the page carried the header,
// only its text said when.
func TestSignInIsBoundedByTheSourceAsTheAPIIs(t *testing.T) {
	reg := testkit.StartRegistry(t, "", "--auth-failure-burst", "3", "--auth-failure-refill", "1h")
	cfg, err := api.LoadClientConfig(reg.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	const madeUp = "bcc_0123456789abcdef.bWFkZS11cA"
	stranger := newClient(t, reg).from("127.0.0.2")
	for range 2 {
		if status, _ := stranger.whoami(madeUp, strings.NewReader("{}")); status != http.StatusUnauthorized {
			t.Fatalf("a made-up credential within the burst: %d", status)
		}
	}
	signIn := func(secret string) page {
		return stranger.post("/ui/signin", url.Values{"credential": {secret}, "csrf": {stranger.csrf("/ui/signin")}})
	}
	if p := signIn(madeUp); p.status != http.StatusUnauthorized {
		t.Fatalf("a made-up sign-in, the burst's last: %d\n%s", p.status, p.body)
	}
	for name, secret := range map[string]string{"a made-up secret": madeUp, "the admin credential": cfg.Credential} {
		p := signIn(secret)
		if p.status != http.StatusServiceUnavailable || !strings.Contains(p.body, string(proto.Unavailable)) ||
			!strings.Contains(p.body, "too many failed credential checks came from 127.0.0.2") || !strings.Contains(p.body, "Try again in 3600 s") {
			t.Errorf("%s signing in beyond the burst: %d\n%s", name, p.status, p.body)
		}
		if retry := p.header.Get("Retry-After"); retry != "3600" {
			t.Errorf("%s signing in beyond the burst: Retry-After %q, want the 3600 s the page says", name, retry)
		}
		if stranger.cookie(console.SessionCookie) != nil {
			t.Errorf("%s beyond the burst made a session", name)
		}
	}
	if status, retry := stranger.whoami(madeUp, strings.NewReader("{}")); status != http.StatusServiceUnavailable || retry != "3600" {
		t.Errorf("the stranger's API call after its sign-ins: %d, Retry-After %q", status, retry)
	}
	operator := newClient(t, reg)
	if p := operator.signIn(reg.AdminConfig); p.status != http.StatusSeeOther || operator.cookie(console.SessionCookie) == nil {
		t.Errorf("the operator's sign-in from 127.0.0.1: %d\n%s", p.status, p.body)
	}
}

// TestASignedInPageRefusedForNowSaysWhen: while the tenant's one waiting place is held
// (serve --api-tenant-waiting 1), each signed-in page, the live stream before it starts
// and a confirmed request are refused UNAVAILABLE, and say when to try again both in
// their text and in their Retry-After header, as the API's answer does, at the first
// refusal: the console does not send the call again as the CLI does, which kept the
// browser waiting 5 to 10 s for the same answer. Before, only the sign-in page carried
// the header, and each page was refused 6 to 12 times first.
func TestASignedInPageRefusedForNowSaysWhen(t *testing.T) {
	reg := testkit.StartRegistry(t, "", "--api-tenant-waiting", "1", "--metrics-listen", "127.0.0.1:0")
	cfg, err := api.LoadClientConfig(reg.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	operator := newClient(t, reg)
	if p := operator.signIn(reg.AdminConfig); p.status != http.StatusSeeOther {
		t.Fatalf("sign in: %d\n%s", p.status, p.body)
	}
	csrf := operator.csrf("/ui/nodes")
	pages := map[string]func() page{
		"the nodes page":       func() page { return operator.get("/ui/nodes") },
		"the sites page":       func() page { return operator.get("/ui/sites") },
		"the pools page":       func() page { return operator.get("/ui/pools") },
		"the images page":      func() page { return operator.get("/ui/images") },
		"a node's live stream": func() page { return operator.get("/ui/nodes/n-1/live") },
		"a confirmed release": func() page {
			return operator.post("/ui/nodes/n-1/release", url.Values{"csrf": {csrf}, "wipe": {"none"}})
		},
	}
	const busy = "better_compute_api_tenant_busy_total"
	for name, get := range pages {
		release := operator.holdWaiting(cfg.Credential)
		before, _ := testkit.Scrape(t, reg.MetricsURL)
		p := get()
		after, _ := testkit.Scrape(t, reg.MetricsURL)
		release()
		if refused := after[busy] - before[busy]; refused != 1 {
			t.Errorf("%s while the tenant's waiting place is held: the API refused %v calls for it, want 1: the page answers the first refusal at once", name, refused)
		}
		retry := p.header.Get("Retry-After")
		seconds, err := strconv.Atoi(retry)
		switch {
		case p.status != http.StatusServiceUnavailable || !strings.Contains(p.body, string(proto.Unavailable)):
			t.Errorf("%s while the tenant's waiting place is held: %d, want 503 UNAVAILABLE\n%s", name, p.status, p.body)
		case err != nil || seconds <= 0:
			t.Errorf("%s refused for now: Retry-After %q, want the positive seconds its text says\n%s", name, retry, p.body)
		case !strings.Contains(p.body, "try again in "+retry+" s"):
			t.Errorf("%s refused for now: its text does not say to try again in the %s s of its Retry-After\n%s", name, retry, p.body)
		}
	}
}

// TestALiveStreamRefusedForNowSaysWhen: a node's live stream, started, whose next read
// the API refuses for now (acme's one waiting place held when its node's run changes)
// cannot carry Retry-After any more: it ends with the stream's retry field at the
// seconds the API asked, so the browser's EventSource connects again then, not after its
// own delay.
func TestALiveStreamRefusedForNowSaysWhen(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t, "--api-tenant-waiting", "1")
	cfg, err := api.LoadClientConfig(acme)
	if err != nil {
		t.Fatal(err)
	}
	b := newClient(t, reg)
	if p := b.signIn(acme); p.status != http.StatusSeeOther {
		t.Fatalf("sign in: %d\n%s", p.status, p.body)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, reg.URL+"/ui/nodes/"+acmeNode.ID+"/live", nil)
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	stream := bufio.NewReader(resp.Body)
	if line, _ := stream.ReadString('\n'); resp.StatusCode != http.StatusOK || line != "event: update\n" {
		t.Fatalf("the stream of acme's enrolling node: %d, begins %q", resp.StatusCode, line)
	}

	release := b.holdWaiting(cfg.Credential)
	defer release()
	testkit.JSON(t, reg.AdminConfig, nil, "nodes", "cancel", acmeNode.ID, "--tenant", "acme") // the admin waits in its own tenant
	var last string
	for {
		line, err := stream.ReadString('\n')
		if err != nil {
			break
		}
		if line != "\n" {
			last = line
		}
	}
	if last != "retry: 1000\n" {
		t.Errorf("the stream refused for now ends with %q; want the API's 1 s as its retry field", last)
	}
}
