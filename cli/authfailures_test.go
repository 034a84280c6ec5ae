package cli_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// strangerAddr is the loopback address the stranger's calls come from; the operator's
// come from 127.0.0.1.
const strangerAddr = "127.0.0.2"

// madeUp is a credential nobody holds, in the shape of a real one.
const madeUp = "bcc_0123456789abcdef.bWFkZS11cA"

// from is c with bearer as its credential and its connections from the loopback address
// local.
func (c rawCaller) from(bearer, local string) rawCaller {
	tr := c.http.Transport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}).DialContext
	c.cfg.Credential, c.http = bearer, &http.Client{Transport: tr}
	return c
}

// whoami calls credentials.whoami and returns the status, the Retry-After header and the
// error answered.
func (c rawCaller) whoami(t *testing.T) (int, string, proto.Error) {
	return c.call(t, "credentials.whoami", strings.NewReader("{}"))
}

// refusedForItsSource reports whether an answer is the refusal of a source over its
// bound, with a Retry-After of 1 to most seconds.
func refusedForItsSource(status int, retry string, e proto.Error, most int) bool {
	seconds, err := strconv.Atoi(retry)
	return status == http.StatusServiceUnavailable && e.Code == proto.Unavailable && e.Details.Reason == proto.ReasonSourceFailures &&
		err == nil && seconds >= 1 && seconds <= most && strings.Contains(e.Message, strangerAddr)
}

// TestAStrangersFailedCredentialsAreRefusedBeforeTheCheck, as the attacker through the real
// serve with its default bound: a stranger on 127.0.0.2 sending made-up credentials has
// its burst of failed checks, then every call, 40 of them at once, is refused UNAVAILABLE
// (source-failures) with Retry-After, and the store is not read for them (the registry's
// count of credential checks stops at the burst). Even the admin credential is refused
// from there for now. Meanwhile the operator on 127.0.0.1 is answered, by the CLI and
// over HTTP. Before the bound every call was checked and answered UNAUTHENTICATED.
func TestAStrangersFailedCredentialsAreRefusedBeforeTheCheck(t *testing.T) {
	reg := testkit.StartRegistry(t, "", "--metrics-listen", "127.0.0.1:0")
	operator := newRawCaller(t, reg.AdminConfig)
	stranger, adminFromThere := operator.from(madeUp, strangerAddr), operator.from(operator.cfg.Credential, strangerAddr)
	most := int(api.DefaultFailureRefill.Seconds())
	for i := range api.DefaultFailureBurst {
		if status, _, e := stranger.whoami(t); status != http.StatusUnauthorized || e.Code != proto.Unauthenticated {
			t.Fatalf("made-up credential %d, within the burst: %d %+v", i+1, status, e)
		}
	}
	var flood sync.WaitGroup
	for range 40 {
		flood.Go(func() {
			if status, retry, e := stranger.whoami(t); !refusedForItsSource(status, retry, e, most) {
				t.Errorf("a made-up credential beyond the burst: %d, Retry-After %q, %+v", status, retry, e)
			}
		})
	}
	if res := testkit.CLI(t, reg.AdminConfig, "tenants", "list", "--format", "json"); res.Code != 0 || strings.Contains(res.Stderr, proto.ReasonSourceFailures) {
		t.Errorf("the operator's CLI call during the flood: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	if status, _, e := operator.whoami(t); status != http.StatusOK {
		t.Errorf("the operator's call from 127.0.0.1 during the flood: %d %+v", status, e)
	}
	flood.Wait()
	if status, retry, e := adminFromThere.whoami(t); !refusedForItsSource(status, retry, e, most) {
		t.Errorf("the admin credential from the stranger's address: %d, Retry-After %q, %+v", status, retry, e)
	}
	samples, text := testkit.Scrape(t, reg.MetricsURL)
	if got := samples[`better_compute_api_credential_checks_total{credential="bearer",result="failed"}`]; got != api.DefaultFailureBurst {
		t.Errorf("%v failed credential checks, want the burst's %d: the refused calls read the store\n%s", got, api.DefaultFailureBurst, text)
	}
	if got := samples[`better_compute_api_source_refused_total{credential="bearer"}`]; got != 41 {
		t.Errorf("%v calls refused for their source, want 41\n%s", got, text)
	}
	if got := samples[`better_compute_api_credential_checks_total{credential="bearer",result="valid"}`]; got < 2 {
		t.Errorf("%v valid credential checks, want the operator's\n%s", got, text)
	}
	if !strings.Contains(reg.Stderr.String(), "source="+strangerAddr) {
		t.Errorf("the registry's log does not name the refused source:\n%s", reg.Stderr)
	}
	if n := strings.Count(reg.Stderr.String(), "too many failed credential checks from a source"); n != 1 {
		t.Errorf("%d log lines of the refusals within a minute, want 1", n)
	}
}

// TestAStrangerIsServedAgainAfterItsRetryAfter: with a short refill, a source refused for
// its failed checks is served again once its Retry-After has passed, one check for each
// refill: a valid credential is answered, then a made-up one checked, and the next
// refused again.
func TestAStrangerIsServedAgainAfterItsRetryAfter(t *testing.T) {
	reg := testkit.StartRegistry(t, "", "--auth-failure-burst", "2", "--auth-failure-refill", "1s")
	operator := newRawCaller(t, reg.AdminConfig)
	stranger, adminFromThere := operator.from(madeUp, strangerAddr), operator.from(operator.cfg.Credential, strangerAddr)
	for range 2 {
		if status, _, e := stranger.whoami(t); status != http.StatusUnauthorized {
			t.Fatalf("within the burst: %d %+v", status, e)
		}
	}
	status, retry, e := stranger.whoami(t)
	if !refusedForItsSource(status, retry, e, 1) {
		t.Fatalf("beyond the burst: %d, Retry-After %q, %+v", status, retry, e)
	}
	seconds, _ := strconv.Atoi(retry)
	time.Sleep(time.Duration(seconds) * time.Second)
	if status, _, e := adminFromThere.whoami(t); status != http.StatusOK {
		t.Errorf("a valid credential after the Retry-After: %d %+v", status, e)
	}
	if status, _, e := stranger.whoami(t); status != http.StatusUnauthorized {
		t.Errorf("a made-up credential after the Retry-After, the valid one having cost nothing: %d %+v", status, e)
	}
	if status, retry, e := stranger.whoami(t); !refusedForItsSource(status, retry, e, 1) {
		t.Errorf("the next one: %d, Retry-After %q, %+v", status, retry, e)
	}
}

// TestServeRefusesAFailureBoundOutOfRange: a burst or refill out of range is INVALID_INPUT
// at its flag, before anything starts.
func TestServeRefusesAFailureBoundOutOfRange(t *testing.T) {
	serveRefusesAtTheFlag(t, map[string][]string{
		"--auth-failure-burst":  {"-1", fmt.Sprint(api.MaxFailureBurst + 1)},
		"--auth-failure-refill": {"0s", "1ms", "2h", "-3s"},
	})
}

// TestServeRefusesALogFormatItDoesNotWrite: a --log-format other than text or json is
// INVALID_INPUT at the flag, before anything starts. Before, serve started and logged
// text, so a mistyped json left a log pipeline that reads JSON with lines it cannot read.
func TestServeRefusesALogFormatItDoesNotWrite(t *testing.T) {
	serveRefusesAtTheFlag(t, map[string][]string{"--log-format": {"JSON", "logfmt", ""}})
}

// serveRefusesAtTheFlag runs serve with each flag at each of its values, and fails t
// unless each is INVALID_INPUT at that flag.
func serveRefusesAtTheFlag(t *testing.T, refused map[string][]string) {
	t.Helper()
	for flag, values := range refused {
		for _, v := range values {
			res := testkit.CLI(t, "", "serve", "--data-dir", t.TempDir(), flag, v, "--format", "json")
			var e testkit.ErrorObject
			json.Unmarshal([]byte(res.Stdout), &e)
			if res.Code != 1 || e.Code != string(proto.InvalidInput) || e.Details.Path != flag {
				t.Errorf("serve %s %s: exit %d\n%s%s", flag, v, res.Code, res.Stdout, res.Stderr)
			}
		}
	}
}
