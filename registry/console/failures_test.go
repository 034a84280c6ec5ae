package console_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

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

// whoami calls the API's credentials.whoami with secret over b's connections.
func (b *client) whoami(secret string) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, b.base+"/v1/credentials.whoami", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
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
		if status, _ := stranger.whoami(madeUp); status != http.StatusUnauthorized {
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
	if status, retry := stranger.whoami(madeUp); status != http.StatusServiceUnavailable || retry != "3600" {
		t.Errorf("the stranger's API call after its sign-ins: %d, Retry-After %q", status, retry)
	}
	operator := newClient(t, reg)
	if p := operator.signIn(reg.AdminConfig); p.status != http.StatusSeeOther || operator.cookie(console.SessionCookie) == nil {
		t.Errorf("the operator's sign-in from 127.0.0.1: %d\n%s", p.status, p.body)
	}
}
