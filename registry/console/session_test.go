package console

import (
	"crypto/sha256"
	"net/http"
	"testing"
	"time"
)

// TestSessionsExpire: a session opens nothing once its expiry passes, on the registry's
// clock, whatever the browser keeps; beyond MaxSessions the one that expires first ends.
func TestSessionsExpire(t *testing.T) {
	now := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	ss := newSessions(func() time.Time { return now })
	request := func(id string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1/ui/nodes", nil)
		r.AddCookie(&http.Cookie{Name: SessionCookie, Value: id})
		return r
	}
	id := ss.start(&session{credential: "bc_x", expires: now.Add(SessionLifetime)})
	now = now.Add(SessionLifetime - time.Second)
	if ss.of(request(id)) == nil {
		t.Fatalf("a session ended before its lifetime")
	}
	now = now.Add(time.Second)
	if ss.of(request(id)) != nil {
		t.Fatalf("a session outlived its lifetime")
	}

	first := ss.start(&session{expires: now.Add(time.Minute)})
	for i := range MaxSessions - 1 {
		ss.start(&session{expires: now.Add(time.Hour + time.Duration(i)*time.Second)})
	}
	if ss.of(request(first)) == nil {
		t.Fatalf("a session ended while there was room")
	}
	ss.start(&session{expires: now.Add(2 * time.Hour)})
	if ss.of(request(first)) != nil || len(ss.byID) != MaxSessions {
		t.Errorf("one session over the bound: the first to expire stays, %d sessions", len(ss.byID))
	}
}

// TestSignInEndsTheSessionsOfTheTenantHoldingMost: at the bound, a sign-in ends the
// session that would expire first of the tenant holding the most sessions, the signing-in
// tenant's counted with its new one: beta signing in over and over ends its own, never
// acme's, which expire first; a tenant holding none ends one of the tenant holding most;
// and a tenant holding more than the signing-in one will loses its first to expire.
func TestSignInEndsTheSessionsOfTheTenantHoldingMost(t *testing.T) {
	now := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	ss := newSessions(func() time.Time { return now })
	count := func() map[string]int {
		held := map[string]int{}
		for _, s := range ss.byID {
			held[s.tenant]++
		}
		return held
	}
	acme := ss.start(&session{tenant: "acme", expires: now.Add(time.Minute)})
	for i := range MaxSessions - 1 {
		ss.start(&session{tenant: "beta", expires: now.Add(time.Hour + time.Duration(i)*time.Second)})
	}
	for range 3 {
		ss.start(&session{tenant: "beta", expires: now.Add(2 * time.Hour)})
	}
	if held := count(); held["acme"] != 1 || held["beta"] != MaxSessions-1 {
		t.Errorf("beta's sign-ins beyond the bound: %v, want acme's one session kept", held)
	}
	if _, ok := ss.byID[sha256.Sum256([]byte(acme))]; !ok {
		t.Errorf("acme's session ended")
	}
	ss.start(&session{tenant: "gamma", expires: now.Add(2 * time.Hour)})
	if held := count(); held["acme"] != 1 || held["beta"] != MaxSessions-2 || held["gamma"] != 1 {
		t.Errorf("gamma's first sign-in: %v, want one of beta's ended", held)
	}
	ss.start(&session{tenant: "acme", expires: now.Add(2 * time.Hour)})
	if held := count(); held["acme"] != 2 || held["beta"] != MaxSessions-3 {
		t.Errorf("acme's second sign-in: %v, want one of beta's ended", held)
	}
	if len(ss.byID) != MaxSessions {
		t.Errorf("%d sessions kept, want %d", len(ss.byID), MaxSessions)
	}
}
