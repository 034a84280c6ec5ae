// Package console is the registry's operator console in the browser, served at /ui/ on
// the API's HTTPS listener: sign in with a credential's secret, then see the sites,
// pools, nodes, a node's inventory, attestations, identity epoch and workflow timeline
// (live while it runs), a site's known MACs and those it leaves out, and the images;
// deploy, release, cancel or revoke a node's agents' certificates, and revoke a site's
// agent's certificate, with confirmation. Every page is built from the API's answers,
// called in-process through the API's own handler as the signed-in credential: the
// console holds no rule of who may see or do what.
package console

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

// Path is where the console is served; Root, the same without its slash, is sent there
// by the console too, with its headers.
const (
	Path = Root + "/"
	Root = "/ui"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets
var assetFiles embed.FS

// maxForm bounds a form's body.
const maxForm = 64 << 10

// Config is what the console is made with.
type Config struct {
	// API is the API's handler (the HTTPS listener's): every page calls it as the
	// signed-in credential.
	API http.Handler
	Log *slog.Logger
	// Now is the time sessions expire by; time.Now when nil.
	Now func() time.Time
}

// Console serves /ui/.
type Console struct {
	api      http.Handler
	log      *slog.Logger
	now      func() time.Time
	sessions *sessions
	pages    map[string]*template.Template
	mux      *http.ServeMux
}

// New makes the console.
func New(cfg Config) *Console {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Console{api: cfg.API, log: cfg.Log, now: cfg.Now, sessions: newSessions(cfg.Now), pages: parsePages(), mux: http.NewServeMux()}
	assets, _ := fs.Sub(assetFiles, "assets")
	files := http.FileServerFS(filesOnly{assets})
	c.mux.Handle("GET /ui/assets/", http.StripPrefix("/ui/assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		files.ServeHTTP(headersKept{w}, r)
	})))
	c.mux.HandleFunc(Root, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, withQuery(Path, r), http.StatusTemporaryRedirect)
	})
	c.mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, withQuery("/ui/nodes", r), http.StatusSeeOther)
	})
	c.mux.HandleFunc("GET /ui/signin", c.visited(c.signinForm))
	c.mux.HandleFunc("POST /ui/signin", c.signin)
	c.mux.HandleFunc("POST /ui/signout", c.form(c.signout))
	c.mux.HandleFunc("GET /ui/nodes", c.page(c.nodes))
	c.mux.HandleFunc("GET /ui/nodes/{id}", c.page(c.node))
	c.mux.HandleFunc("GET /ui/nodes/{id}/live", c.live)
	c.mux.HandleFunc("GET /ui/nodes/{id}/{action}", c.page(c.confirm(nodeRequests)))
	c.mux.HandleFunc("POST /ui/nodes/{id}/{action}", c.form(c.act(nodeRequests)))
	c.mux.HandleFunc("GET /ui/sites", c.page(c.sites))
	c.mux.HandleFunc("GET /ui/sites/{id}/known-macs", c.page(c.knownMACs)) // a literal segment: more specific than an action's, it wins
	c.mux.HandleFunc("GET /ui/sites/{id}/{action}", c.page(c.confirm(siteRequests)))
	c.mux.HandleFunc("POST /ui/sites/{id}/{action}", c.form(c.act(siteRequests)))
	c.mux.HandleFunc("GET /ui/pools", c.page(c.pools))
	c.mux.HandleFunc("GET /ui/images", c.page(c.images))
	c.mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusNotFound, "error", nil, view{Title: "Not found",
			Err: proto.Errorf(proto.NotFound, "no console page %s: the pages are Nodes, Sites, Pools and Images", proto.Quote(r.URL.Path))})
	})
	return c
}

// ServeHTTP serves the console with headers that keep its pages to themselves: only its
// own scripts, styles and forms, never framed, never cached, no referrer to other sites.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setHeaders(w.Header())
	c.mux.ServeHTTP(w, r)
}

// setHeaders sets the console's headers on an answer.
func setHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // no-referrer would make browsers send Origin: null on the console's own forms
	h.Set("Cache-Control", "no-store")
	h.Set("Strict-Transport-Security", "max-age=31536000")
}

// headersKept sets the console's headers again as its answer's status is written:
// http.FileServer deletes Cache-Control from an error's answer (a file missing, a range
// past its end) before it writes the error's status.
type headersKept struct{ http.ResponseWriter }

func (w headersKept) WriteHeader(status int) {
	setHeaders(w.Header())
	w.ResponseWriter.WriteHeader(status)
}

// filesOnly is the console's assets as its file server sees them: files, and no
// directory, so that /ui/assets/ and any directory under it answer 404 rather than a
// listing of what the binary embeds.
type filesOnly struct{ fs.FS }

func (a filesOnly) Open(name string) (fs.File, error) {
	f, err := a.FS.Open(name)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || st.IsDir() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return f, nil
}

// withQuery is path with r's query: a redirect of the console's root keeps what its
// link asked (/ui?find=ID opens the node, /ui?state=failed the failed nodes).
func withQuery(path string, r *http.Request) string {
	if r.URL.RawQuery == "" {
		return path
	}
	return path + "?" + r.URL.RawQuery
}

// view is what every page's layout shows, with the page's own data.
type view struct {
	Title string
	// Nav is the section of the navigation the page belongs to.
	Nav string
	// Tenant, Credential and CSRF are the session's; empty when signed out.
	Tenant, Credential, CSRF string
	// Err is the API's answer when it refused the page's call.
	Err  *proto.Error
	Data any
}

// call calls an API method as the session's credential.
func (c *Console) call(ctx context.Context, s *session, method string, req, resp any) error {
	return c.client(s.credential).Call(ctx, method, req, resp)
}

// client is an in-process client of the API with credential as its bearer. A call the
// API refuses for now is not sent again: the page answers with its Retry-After at once.
func (c *Console) client(credential string) *api.Client {
	return api.NewHandlerClient(c.api, credential)
}

// page serves a page to a signed-in browser, sending any other to the sign-in page; a
// fetch visited refuses is refused first.
func (c *Console) page(h func(w http.ResponseWriter, r *http.Request, s *session)) http.HandlerFunc {
	return c.visited(func(w http.ResponseWriter, r *http.Request) {
		s := c.sessions.of(r)
		if s == nil {
			http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
			return
		}
		h(w, r, s)
	})
}

// visited serves a page that calls the API or sets a cookie only when the browser
// fetched it from the console's own pages (fetchedHere) or opens it as a page of its own
// (navigated: a link followed, the address bar, a bookmark). A page of another origin of
// the same site (a sibling subdomain, another https port of the host) is sent the
// SameSite=Strict cookies: it may link to the console, but an image, a script, a style,
// a frame or a fetch of a console page it loaded would call the API as the operator's
// session, counted against the tenant's bounds, or replace the sign-in form's cookie.
// Those are refused FORBIDDEN before anything else, and logged.
func (c *Console) visited(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if fetchedHere(r) || navigated(r) {
			h(w, r)
			return
		}
		site, dest := r.Header.Get("Sec-Fetch-Site"), r.Header.Get("Sec-Fetch-Dest")
		e := proto.Errorf(proto.Forbidden, "a console page is opened by a link or the address bar, not loaded into another origin's page (Sec-Fetch-Site %s, Sec-Fetch-Dest %s): open https://%s%s",
			proto.Quote(site), proto.Quote(dest), r.Host, proto.Quote(r.URL.Path))
		c.log.Info("console fetch refused", "path", proto.Quote(r.URL.Path), "site", proto.Quote(site), "dest", proto.Quote(dest), "code", e.Code)
		c.render(w, r, e.Code.HTTPStatus(), "error", nil, view{Title: "Refused", Err: e})
	}
}

// form serves a state-changing form of a signed-in browser: from the console's own
// origin, carrying the token of the session its cookie names. Anything else is refused
// before the form is read further.
func (c *Console) form(h func(w http.ResponseWriter, r *http.Request, s *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		s := c.sessions.of(r)
		var err *proto.Error
		switch {
		case !sameOrigin(r):
			err = proto.Errorf(proto.Forbidden, "the form was not sent from this console's own pages (Origin %s): open the console at https://%s/ui/ and submit it there", proto.Quote(r.Header.Get("Origin")), r.Host)
		case s == nil:
			err = proto.Errorf(proto.Unauthenticated, "not signed in, or the session expired: sign in again")
		case !tokenMatches(r.PostFormValue("csrf"), s.csrf):
			err = proto.Errorf(proto.Forbidden, "the form's token is not this session's: reload the page and submit it again")
		}
		if err != nil {
			c.log.Info("console form refused", "path", proto.Quote(r.URL.Path), "code", err.Code)
			c.render(w, r, err.Code.HTTPStatus(), "error", nil, view{Title: "Refused", Err: err})
			return
		}
		h(w, r, s)
	}
}

// refused answers a page whose API call failed: a credential the API no longer takes
// ends the session.
func (c *Console) refused(w http.ResponseWriter, r *http.Request, s *session, title string, err error) {
	e, status := refusal(w, err)
	if e.Code == proto.Unauthenticated {
		c.sessions.end(r)
		clearCookie(w, SessionCookie)
	}
	c.render(w, r, status, "error", s, view{Title: title, Err: e})
}

// refusal is the API's refusal err as the console answers it: the error a page shows and
// its status. A call refused for now (UNAVAILABLE with Retry-After: its tenant's waiting
// calls, its source's failed credential checks) gives the page the API's Retry-After too,
// so that a browser or a script is told when to try again as the API's own callers are.
// It sets a header: call it before the answer's status is written.
func refusal(w http.ResponseWriter, err error) (*proto.Error, int) {
	e := proto.AsError(err)
	if seconds := api.RetryAfter(err); seconds >= 0 {
		w.Header().Set("Retry-After", strconv.Itoa(seconds))
	}
	return e, e.Code.HTTPStatus()
}

// render writes page name with v, filled in with the session's.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, s *session, v view) {
	if s != nil {
		v.Tenant, v.Credential, v.CSRF = s.tenant, s.credentialID, s.csrf
	}
	var b strings.Builder
	if err := c.pages[name].ExecuteTemplate(&b, "layout", v); err != nil {
		c.log.Error("console page", "page", name, "err", err)
		http.Error(w, "internal error: the registry's log has the details", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write([]byte(b.String()))
}

// signinForm shows the sign-in page with a fresh token, which its cookie carries too.
func (c *Console) signinForm(w http.ResponseWriter, r *http.Request) {
	if c.sessions.of(r) != nil {
		http.Redirect(w, r, "/ui/nodes", http.StatusSeeOther)
		return
	}
	c.showSignin(w, r, http.StatusOK, nil)
}

// showSignin shows the sign-in page with the token of the browser's sign-in cookie,
// renewed, or a fresh one when it holds none: a sign-in page opened again (another tab,
// a link from another page of the site) leaves the token of a form shown before as it
// was, so that form still signs in.
func (c *Console) showSignin(w http.ResponseWriter, r *http.Request, status int, err *proto.Error) {
	token := randomToken()
	if cookie, e := r.Cookie(signinCookie); e == nil && isToken(cookie.Value) {
		token = cookie.Value
	}
	setCookie(w, signinCookie, token, signinLifetime)
	c.render(w, r, status, "signin", nil, view{Title: "Sign in", CSRF: token, Err: err})
}

// signin takes a credential's secret (or the whole credential file), asks the API whose
// it is, and starts a session for it.
func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	cookie, _ := r.Cookie(signinCookie)
	switch {
	case !sameOrigin(r):
		c.showSignin(w, r, http.StatusForbidden, proto.Errorf(proto.Forbidden, "the sign-in form was not sent from this console's own page: sign in at https://%s/ui/signin", r.Host))
		return
	case cookie == nil || !tokenMatches(r.PostFormValue("csrf"), cookie.Value):
		c.showSignin(w, r, http.StatusForbidden, proto.Errorf(proto.Forbidden, "the sign-in form expired or is not this browser's: sign in again"))
		return
	}
	secret, err := credentialOf(r.PostFormValue("credential"))
	if err != nil {
		c.showSignin(w, r, http.StatusBadRequest, proto.AsError(err))
		return
	}
	s := &session{credential: secret, csrf: randomToken()}
	var who api.Credential
	client := c.client(secret)
	client.OnBehalfOf(r) // bounded by the browser's address, as the API's calls are
	if err := client.Call(r.Context(), "credentials.whoami", struct{}{}, &who); err != nil {
		e, status := refusal(w, err)
		if e.Details.Reason != proto.ReasonSourceFailures { // the API logs those once a minute a source
			c.log.Info("console sign-in refused", "code", e.Code)
		}
		c.showSignin(w, r, status, e)
		return
	}
	now := c.now()
	s.tenant, s.credentialID, s.expires = who.TenantID, who.ID, now.Add(SessionLifetime)
	if !who.ExpiresAt.IsZero() && who.ExpiresAt.Before(s.expires) {
		s.expires = who.ExpiresAt
	}
	setCookie(w, SessionCookie, c.sessions.start(s), s.expires.Sub(now))
	clearCookie(w, signinCookie)
	c.log.Info("console sign-in", "tenant", s.tenant, "credential", s.credentialID, "expires", s.expires)
	http.Redirect(w, r, "/ui/nodes", http.StatusSeeOther)
}

// credentialOf is the secret a sign-in names: the secret itself, or a credential file
// (admin.conf, credentials create --out) pasted whole.
func credentialOf(field string) (string, error) {
	field = strings.TrimSpace(field)
	if !strings.HasPrefix(field, "{") {
		if field == "" {
			return "", proto.Errorf(proto.InvalidInput, "give the credential: the value of \"credential\" in its file, or the whole file").WithPath("credential")
		}
		return field, nil
	}
	var cfg api.ClientConfig
	if err := api.DecodeStrict([]byte(field), &cfg); err != nil {
		// The form's field is the path; the file's own field it names goes in the message.
		e, at := proto.AsError(err), ""
		if e.Details.Path != "" {
			at = ", at " + e.Details.Path
		}
		return "", proto.Errorf(proto.InvalidInput, "the pasted credential file%s: %s", at, e.Message).WithPath("credential")
	}
	if cfg.Credential == "" {
		return "", proto.Errorf(proto.InvalidInput, "the pasted file has no \"credential\": paste a file written by `credentials create --out`").WithPath("credential")
	}
	return cfg.Credential, nil
}

// signout ends the session.
func (c *Console) signout(w http.ResponseWriter, r *http.Request, s *session) {
	c.sessions.end(r)
	clearCookie(w, SessionCookie)
	c.log.Info("console sign-out", "tenant", s.tenant, "credential", s.credentialID)
	http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
}
