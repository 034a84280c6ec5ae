package console

import (
	"net/http"
	"testing"
	"time"
)

// TestSessionsExpire: a session opens nothing once its expiry passes, on the registry's
// clock, whatever the browser keeps; beyond maxSessions the one that expires first ends.
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
	for i := range maxSessions - 1 {
		ss.start(&session{expires: now.Add(time.Hour + time.Duration(i)*time.Second)})
	}
	if ss.of(request(first)) == nil {
		t.Fatalf("a session ended while there was room")
	}
	ss.start(&session{expires: now.Add(2 * time.Hour)})
	if ss.of(request(first)) != nil || len(ss.byID) != maxSessions {
		t.Errorf("one session over the bound: the first to expire stays, %d sessions", len(ss.byID))
	}
}
