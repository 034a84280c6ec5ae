package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// The session cookie and the sign-in form's cookie. The __Host- prefix makes a browser
// take them only when Secure, from this host, with Path=/ and no Domain: no other host
// (a sibling subdomain) can set or overwrite them.
const (
	SessionCookie = "__Host-bc-session"
	signinCookie  = "__Host-bc-signin"
)

// Lifetimes and bounds of sessions.
const (
	// SessionLifetime is how long a session lasts from its sign-in, whatever is done with
	// it; a credential that expires sooner ends it sooner.
	SessionLifetime = 8 * time.Hour
	// signinLifetime is how long a sign-in form may wait before it is submitted.
	signinLifetime = 10 * time.Minute
	// MaxSessions bounds the sessions kept; a sign-in beyond it ends a session of the
	// tenant holding the most (sessions.evictee), so no tenant's sign-ins end the
	// sessions of a tenant holding fewer. Only a credential that authenticates makes a
	// session.
	MaxSessions = 4096
	// maxLive bounds the live streams one session holds open at once.
	maxLive = 8
)

// session is one signed-in browser. It lives only in the registry's memory: the cookie
// holds a random id, and the map is keyed by the id's SHA-256, so neither the cookie nor
// anything written to disk holds the credential.
type session struct {
	// credential is the bearer secret the browser signed in with: every page calls the
	// API with it.
	credential string
	// csrf is the token every state-changing form of this session carries.
	csrf         string
	tenant       string
	credentialID string
	expires      time.Time
	// live counts the live streams open; guarded by sessions.mu.
	live int
	// ended is closed when the registry forgets the session (sign-out, a revoked
	// credential, a sign-in beyond MaxSessions, its expiry), ending its live streams.
	ended chan struct{}
}

// sessions are the signed-in browsers by the SHA-256 of their cookie's id.
type sessions struct {
	mu   sync.Mutex
	byID map[[32]byte]*session
	now  func() time.Time
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{byID: map[[32]byte]*session{}, now: now}
}

// randomToken is 256 random bits, base64url.
func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// isToken reports whether s has the shape of randomToken's.
func isToken(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == 32
}

// start keeps s and returns the id its cookie carries.
func (ss *sessions) start(s *session) string {
	id := randomToken()
	s.ended = make(chan struct{})
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	for k, old := range ss.byID {
		if !now.Before(old.expires) {
			ss.drop(k)
		}
	}
	if len(ss.byID) >= MaxSessions {
		ss.drop(ss.evictee(s.tenant))
	}
	ss.byID[sha256.Sum256([]byte(id))] = s
	return id
}

// evictee is the session a sign-in of tenant ends when MaxSessions are kept: the one
// that would expire first of the tenant holding the most sessions, tenant's own counted
// with the one it adds. A sign-in thus ends another tenant's session only when that
// tenant holds more sessions than the signing-in one will, so a tenant signing in over
// and over ends its own sessions, never those of a tenant holding fewer. ss.mu is held.
func (ss *sessions) evictee(tenant string) [32]byte {
	held := map[string]int{}
	for _, s := range ss.byID {
		held[s.tenant]++
	}
	if held[tenant] > 0 {
		held[tenant]++
	}
	most := proto.HoldingMost(held, tenant)
	var first [32]byte
	var at time.Time
	for k, s := range ss.byID {
		if s.tenant == most && (at.IsZero() || s.expires.Before(at)) {
			first, at = k, s.expires
		}
	}
	return first
}

// of is the live session r's cookie names, nil when there is none.
func (ss *sessions) of(r *http.Request) *session {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return nil
	}
	key := sha256.Sum256([]byte(c.Value))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.byID[key]
	if s != nil && !ss.now().Before(s.expires) {
		ss.drop(key)
		return nil
	}
	return s
}

// drop forgets the session of key and closes its ended. ss.mu is held.
func (ss *sessions) drop(key [32]byte) {
	if s := ss.byID[key]; s != nil {
		delete(ss.byID, key)
		close(s.ended)
	}
}

// over reports whether s has ended or expired: a live stream it opened sends nothing
// more.
func (ss *sessions) over(s *session) bool {
	select {
	case <-s.ended:
		return true
	default:
		return !ss.now().Before(s.expires)
	}
}

// end forgets the session r's cookie names.
func (ss *sessions) end(r *http.Request) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		ss.mu.Lock()
		ss.drop(sha256.Sum256([]byte(c.Value)))
		ss.mu.Unlock()
	}
}

// openLive counts one more live stream of s, false when it holds maxLive already.
func (ss *sessions) openLive(s *session) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s.live >= maxLive {
		return false
	}
	s.live++
	return true
}

func (ss *sessions) closeLive(s *session) {
	ss.mu.Lock()
	s.live--
	ss.mu.Unlock()
}

// setCookie sets a cookie the browser sends back only over HTTPS, only to this host,
// only from its own pages (SameSite=Strict), never to scripts (HttpOnly).
func setCookie(w http.ResponseWriter, name, value string, maxAge time.Duration) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: int(maxAge.Seconds()),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
}

// clearCookie tells the browser to drop a cookie.
func clearCookie(w http.ResponseWriter, name string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
}

// sameOrigin reports whether a state-changing request comes from the console's own
// pages: its Origin is this host over https, and a browser's Sec-Fetch-Site, when sent,
// says same-origin. A request without Origin is refused: every browser the console
// serves sends it on a POST.
func sameOrigin(r *http.Request) bool {
	return fetchedHere(r) && r.Header.Get("Origin") == "https://"+r.Host
}

// navigated reports whether r is a browser's top-level navigation (Sec-Fetch-Mode:
// navigate, Sec-Fetch-Dest: document): a link followed, the address bar, a bookmark, a
// form's GET; a frame's navigation (Sec-Fetch-Dest: iframe) is not one.
func navigated(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document"
}

// fetchedHere reports whether a browser's Sec-Fetch-Site, when sent, says r comes from
// the console's own pages. A page of another origin of the same site (a sibling
// subdomain, another https port of the host) is sent the SameSite=Strict cookie too;
// Sec-Fetch-Site tells it apart.
func fetchedHere(r *http.Request) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	return site == "" || site == "same-origin"
}

// tokenMatches compares a form's token with the expected one in constant time.
func tokenMatches(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
