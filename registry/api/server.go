// Package api is the registry's operator plane: an HTTPS JSON API of methods called as
// `POST /v1/<service>.<method>` with a bearer credential, and the client the CLI uses.
// Every error is a proto.Error; every list pages at most 200 items with a cursor.
package api

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// What one caller may cost the registry. Only join.join is public; every other method is
// refused before its body is read unless its bearer credential authenticates.
const (
	// maxBody bounds an authenticated request body: the largest is a profile document
	// (at most 1 MiB) sent as a JSON string, where an escape (\" \\ \n) takes each byte
	// at most to two, with room beside it for the request's other fields (tenant, id,
	// versions): twice the document alone refused a legal one of \" over and over.
	maxBody = 2*proto.MaxProfileDocument + 64<<10
	// maxPublic bounds the public calls served at once; one more is answered UNAVAILABLE
	// at once, with Retry-After, and its connection closed.
	maxPublic = 64
	// retryAfter is the Retry-After of that answer, in seconds.
	retryAfter = 1
	// publicReadTimeout bounds how long a public call's body may take to arrive.
	publicReadTimeout = 10 * time.Second
	// readTimeout bounds how long any request may take to arrive, headers and body;
	// writeTimeout how long a call may take from its headers to its answer (above
	// maxWatch); idleTimeout how long a connection may wait for its next request.
	readTimeout  = time.Minute
	writeTimeout = time.Minute
	idleTimeout  = time.Minute
	// maxStreams bounds the concurrent calls of one HTTP/2 connection, and
	// maxStreamBuffer what the registry buffers of each one's body before its method
	// reads it.
	maxStreams      = 32
	maxStreamBuffer = 256 << 10
)

// BoundServer sets the timeouts and the HTTP/2 bounds of the HTTPS server that serves the
// API, so that neither idle nor slow connections nor one connection's many streams hold
// the registry's memory.
func BoundServer(srv *http.Server) {
	srv.ReadHeaderTimeout = 10 * time.Second
	srv.ReadTimeout = readTimeout
	srv.WriteTimeout = writeTimeout
	srv.IdleTimeout = idleTimeout
	srv.MaxHeaderBytes = 64 << 10
	srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: maxStreams,
		MaxReceiveBufferPerStream: maxStreamBuffer, MaxReceiveBufferPerConnection: 1 << 20}
}

// Method is one API method: the action it needs and what it does.
type Method struct {
	// Action is the action the caller must hold; empty lets any authenticated caller in.
	Action string
	// HostOnly methods answer only on the admin socket.
	HostOnly bool
	// Public methods take no bearer credential: their body carries what authenticates
	// them (join.join's sealed token). Their bodies must arrive within
	// publicReadTimeout, and are read before anything else, holding nothing; at most
	// maxPublic are then served at once.
	Public bool
	// RefusedToken, for a public method whose body carries a join token (join.join),
	// tells whether a call's error refused the token. Such calls are bounded by the
	// failed credential checks of their source address (FailureLimits): one is refused
	// before its token is opened when its source has no failure left, and one whose error
	// refused its token costs its source a failure; the others cost nothing.
	RefusedToken func(err error) bool
	// MaxBody bounds the request body in bytes; 0 is maxBody.
	MaxBody int
	// Call decodes the body and does the work.
	Call func(ctx context.Context, c *Caller, body []byte) (any, error)
}

// Server routes API calls to methods.
type Server struct {
	store   *store.Store
	log     *slog.Logger
	methods map[string]Method
	// public holds a token for each public call being served.
	public chan struct{}
	// observer is told of every call answered, admissionObserver of their admission,
	// credentialObserver of their credential checks; none when nil.
	observer           RequestObserver
	admissionObserver  AdmissionObserver
	credentialObserver CredentialObserver
	// admission bounds the authenticated calls of the HTTPS API (Limits).
	admission *admission
	// failures bounds each source's failed credential checks (FailureLimits); nil when
	// the bound is off.
	failures *failureBound
}

// RequestObserver is told of every call the server answers: the method (a registered
// one, else "unknown"), the answer's code (OK or the error's) and how long it took. The
// registry's metrics are one.
type RequestObserver interface {
	APIRequest(method, code string, took time.Duration)
}

// AdmissionObserver is told, beside the calls, of the admission of authenticated calls
// (Limits), with no tenant in it: how long each call that could not run at once waited
// for its slot, and each call refused tenant-busy. The registry's metrics are one.
type AdmissionObserver interface {
	APIQueued(waited time.Duration)
	APITenantBusy()
}

// CredentialObserver is told of each credential checked, bearer credentials against the
// store and join tokens by the join, and whether it was valid, and of each call refused
// before its check because its source address is over its bound of failed checks
// (FailureLimits), by the credential it carried: CredentialBearer or
// CredentialJoinToken. The registry's metrics are one.
type CredentialObserver interface {
	APICredentialChecked(credential string, valid bool)
	APISourceRefused(credential string)
}

// The credentials a CredentialObserver is told of: the bearer credential of API calls
// and console sign-ins, and join.join's join token.
const (
	CredentialBearer    = "bearer"
	CredentialJoinToken = "join-token"
)

// Observe makes o the server's request observer, and its admission and credential
// observer when o is one.
func (s *Server) Observe(o RequestObserver) {
	s.observer = o
	s.admissionObserver, _ = o.(AdmissionObserver)
	s.credentialObserver, _ = o.(CredentialObserver)
}

// Limit sets the bounds of the authenticated calls; a server not given any has the
// default ones.
func (s *Server) Limit(l Limits) { s.admission = newAdmission(l, maxQueueWait) }

// LimitFailures sets the bound of each source's failed credential checks, whose buckets
// refill as now tells the time; a server not given one has the default one, on the
// system's clock.
func (s *Server) LimitFailures(l FailureLimits, now func() time.Time) {
	s.failures = nil
	if !l.Off {
		s.failures = newFailureBound(l, MaxFailureSources, now, s.log)
	}
}

// NewServer makes a server over st with no methods yet.
func NewServer(st *store.Store, log *slog.Logger) *Server {
	return &Server{store: st, log: log, methods: map[string]Method{}, public: make(chan struct{}, maxPublic),
		admission: newAdmission(Limits{}, maxQueueWait), failures: newFailureBound(FailureLimits{}, MaxFailureSources, time.Now, log)}
}

// Register adds a method under its full name, "service.method".
func (s *Server) Register(name string, m Method) {
	if _, dup := s.methods[name]; dup {
		panic("api: method registered twice: " + name)
	}
	s.methods[name] = m
}

// Handle registers a method whose body decodes strictly into Req.
func Handle[Req, Resp any](s *Server, name, action string, f func(ctx context.Context, c *Caller, req Req) (Resp, error)) {
	s.Register(name, Method{Action: action, Call: typed(f)})
}

// HandleHost registers a host-only method whose body decodes strictly into Req.
func HandleHost[Req, Resp any](s *Server, name string, f func(ctx context.Context, c *Caller, req Req) (Resp, error)) {
	s.Register(name, Method{HostOnly: true, Call: typed(f)})
}

func typed[Req, Resp any](f func(ctx context.Context, c *Caller, req Req) (Resp, error)) func(context.Context, *Caller, []byte) (any, error) {
	return func(ctx context.Context, c *Caller, body []byte) (any, error) {
		var req Req
		if err := DecodeStrict(body, &req); err != nil {
			return nil, err
		}
		return f(ctx, c, req)
	}
}

// bodyLimits bound the parse of a body already within its size limit; a profile document
// nests at most 32 deep within a request.
var bodyLimits = jsondoc.Limits{MaxBytes: math.MaxInt, MaxDepth: 64}

// DecodeStrict decodes one JSON value into v with the strict decoder (jsondoc.Decoder),
// INVALID_INPUT naming the offending field; an empty body is {}.
func DecodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	return jsondoc.Decoder{Name: "the body", Limits: bodyLimits}.Decode(body, v)
}

// checkContentType refuses a body that is not sent as JSON.
func checkContentType(r *http.Request) error {
	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	isJSON := err == nil && mediaType == "application/json"
	for name, value := range params {
		isJSON = isJSON && name == "charset" && strings.EqualFold(value, "utf-8")
	}
	if isJSON {
		return nil
	}
	return proto.Errorf(proto.InvalidInput, "the body is sent as %q: send it as JSON, with Content-Type: application/json (charset utf-8 if any)", r.Header.Get("Content-Type")).WithPath("Content-Type")
}

// ServeHTTP serves bearer-authenticated calls (the HTTPS listener).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.serve(w, r, false) }

// HostHandler serves calls from the admin socket: the caller is the host, acting as the
// root tenant with every action. Only reachable through a 0600 socket in the data
// directory.
func (s *Server) HostHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, true) })
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, host bool) {
	start := time.Now()
	name, ok := strings.CutPrefix(r.URL.Path, "/v1/")
	var result any
	var caller *Caller
	status := 0
	err := func() error {
		if r.Method != http.MethodPost || !ok {
			return proto.Errorf(proto.NotFound, "no such endpoint: call POST /v1/<service>.<method>")
		}
		m, known := s.methods[name]
		if !known {
			return proto.Errorf(proto.NotFound, "no such method %q", name)
		}
		var err error
		var src netip.Prefix
		var body []byte
		bounded := false
		if m.Public {
			// Its body first, whole, holding nothing: one sent slowly takes none of the
			// maxPublic calls served at once (a stranger's 64 trickling join bodies kept
			// every machine's join out), and passes its source's bound only once read, so
			// that calls let in at once are still bounded by maxPublic.
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(publicReadTimeout))
			if body, status, err = readPublic(w, r, name, m); err != nil {
				return err
			}
			if m.RefusedToken != nil {
				if src, bounded = s.sourceBound(r); bounded {
					// Taken only when the token is refused: the public bound bounds the
					// checks under way at once.
					if wait, err := s.failures.allow(r.Context(), src, joinHint); err != nil {
						return s.sourceRefused(w, CredentialJoinToken, wait, err)
					}
				}
			}
			select {
			case s.public <- struct{}{}:
				defer func() { <-s.public }()
			default:
				w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
				w.Header().Set("Connection", "close")
				return proto.Errorf(proto.Unavailable, "the registry is serving as many %s calls as it takes at once: try again in %d s", name, retryAfter)
			}
			caller = &Caller{}
		} else if caller, err = s.authenticate(w, r, host); err != nil {
			return err
		}
		caller.st = s.store
		if addr, ok := remoteAddr(r); ok {
			caller.Source = addr.String()
		}
		if m.HostOnly && !caller.Host {
			return proto.Errorf(proto.Forbidden, "%s is only available on the registry's host, through its admin socket", name)
		}
		if m.Action != "" && !caller.Can(m.Action) {
			return proto.Errorf(proto.Forbidden, "%s needs the action %s, which this credential does not have", name, m.Action)
		}
		if !m.Public {
			if err := checkContentType(r); err != nil {
				status = http.StatusUnsupportedMediaType
				return err
			}
		}
		var t *ticket
		if !m.Public && !caller.Host {
			t, err = s.admission.arrive(caller.Tenant)
			defer t.done()
			if err != nil {
				return err
			}
		}
		if !m.Public {
			if body, status, err = readBody(w, r, name, cmp.Or(m.MaxBody, maxBody)); err != nil {
				return err
			}
		}
		if t != nil {
			err := t.run(r.Context())
			if s.admissionObserver != nil && t.waited > 0 {
				s.admissionObserver.APIQueued(t.waited)
			}
			if err != nil {
				return err
			}
			caller.ticket = t
		}
		result, err = callMethod(r.Context(), m, caller, body)
		if m.RefusedToken != nil {
			s.tokenChecked(src, bounded, err, m.RefusedToken(err))
		}
		return err
	}()
	method := name
	if _, known := s.methods[name]; !known {
		name, method = proto.Quote(name), "unknown" // any path a stranger sends, cut short
	}
	took := time.Since(start)
	if s.observer != nil {
		code := "OK"
		if err != nil {
			code = string(proto.AsError(err).Code)
		}
		s.observer.APIRequest(method, code, took)
	}
	attrs := []any{"method", name, "duration", took}
	if caller != nil && caller.CredentialID != "" {
		attrs = append(attrs, "tenant", caller.Tenant, "credential", caller.CredentialID)
	}
	if err != nil {
		e := proto.AsError(err)
		if e.Details.Reason == proto.ReasonSourceFailures {
			// Logged by the bound, at most once a minute for each source.
			writeJSON(w, e.Code.HTTPStatus(), e)
			return
		}
		attrs = append(attrs, "code", e.Code)
		if e.Details.Reason == proto.ReasonTenantBusy {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
			if s.admissionObserver != nil {
				s.admissionObserver.APITenantBusy()
			}
		}
		if e.Code == proto.Internal {
			s.log.Error("api call failed", append(attrs, "err", err)...)
			e = proto.Errorf(proto.Internal, "internal error: the registry's log has the details")
		} else {
			s.log.Info("api call", attrs...)
		}
		writeJSON(w, cmp.Or(status, e.Code.HTTPStatus()), e)
		return
	}
	s.log.Info("api call", attrs...)
	writeJSON(w, http.StatusOK, result)
}

// callMethod runs method m for caller. A panic in it is an INTERNAL answer, logged with its
// stack as every INTERNAL error is, rather than a connection dropped without one: the
// caller learns the call failed and that the fault is the registry's (the CLI would say
// it cannot reach the registry), and the store's transaction the panic left was rolled
// back by the store.
func callMethod(ctx context.Context, m Method, caller *Caller, body []byte) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			result, err = nil, proto.Errorf(proto.Internal, "panic: %v\n%s", p, debug.Stack())
		}
	}()
	return m.Call(ctx, caller, body)
}

// readPublic reads the body of a call of the public method m, named name, after checking
// its content type. A refusal comes with the HTTP status to answer it with when that is
// not its code's.
func readPublic(w http.ResponseWriter, r *http.Request, name string, m Method) ([]byte, int, error) {
	if err := checkContentType(r); err != nil {
		return nil, http.StatusUnsupportedMediaType, err
	}
	return readBody(w, r, name, cmp.Or(m.MaxBody, maxBody))
}

// readBody reads a request body of at most limit bytes. A refusal comes with the HTTP
// status to answer it with when that is not its code's.
func readBody(w http.ResponseWriter, r *http.Request, method string, limit int) ([]byte, int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return nil, http.StatusRequestEntityTooLarge, proto.Errorf(proto.InvalidInput, "the request body is over %d bytes, the most %s takes", limit, method)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, http.StatusRequestTimeout, proto.Errorf(proto.Timeout, "the request body did not arrive in time: send it whole at once")
	}
	if err != nil {
		return nil, 0, proto.Errorf(proto.InvalidInput, "read the request body: %v", err)
	}
	return body, 0, nil
}

// authenticate is the caller a request's bearer credential names. A request from a
// source over its bound of failed checks is refused before the check, with Retry-After;
// one finding its source's bucket empty while other checks from there are under way waits
// for them first.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, host bool) (caller *Caller, err error) {
	if host {
		return &Caller{Tenant: store.RootTenant, Actions: []string{ActionAll}, CredentialID: "host", Host: true}, nil
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, proto.Errorf(proto.Unauthenticated, "no credential: send Authorization: Bearer <credential>, or point the CLI at a config file with --config")
	}
	failed := false
	if src, bounded := s.sourceBound(r); bounded {
		checking, wait, err := s.failures.take(r.Context(), src, bearerHint)
		if err != nil {
			return nil, s.sourceRefused(w, CredentialBearer, wait, err)
		}
		// Settled even when the check panics, lest its source's calls wait for it.
		defer func() { s.failures.settle(checking, failed) }()
	}
	caller, err = s.check(bearer)
	failed = proto.CodeOf(err) == proto.Unauthenticated
	if s.credentialObserver != nil && (err == nil || failed) {
		s.credentialObserver.APICredentialChecked(CredentialBearer, err == nil)
	}
	return caller, err
}

// sourceBound is the source of r and whether the bound of failed checks applies to it:
// r has one, and the bound is on.
func (s *Server) sourceBound(r *http.Request) (netip.Prefix, bool) {
	src, ok := sourceOf(r)
	return src, ok && s.failures != nil
}

// sourceRefused answers err, the refusal of a call by the bound of failed checks, with
// Retry-After when wait says one, and counts it by the credential it carried when its
// source is over its bound (reason source-failures).
func (s *Server) sourceRefused(w http.ResponseWriter, credential string, wait int, err error) error {
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(wait))
	}
	if s.credentialObserver != nil && proto.AsError(err).Details.Reason == proto.ReasonSourceFailures {
		s.credentialObserver.APISourceRefused(credential)
	}
	return err
}

// tokenChecked settles the join token check of a call that returned err: refused, it
// costs the call's source a failure when the source is bounded; refused or valid, it is
// counted.
func (s *Server) tokenChecked(src netip.Prefix, bounded bool, err error, refused bool) {
	if bounded && refused {
		s.failures.charge(src)
	}
	if s.credentialObserver != nil && (err == nil || refused) {
		s.credentialObserver.APICredentialChecked(CredentialJoinToken, err == nil)
	}
}

// check is the caller a bearer credential names, read from the store.
func (s *Server) check(bearer string) (*Caller, error) {
	// The credential is read through the request's Reader, so the handler's reads share
	// its barrier (on etcd).
	rd, err := s.store.Reader()
	if err != nil {
		return nil, err
	}
	var cred store.Credential
	err = rd.View(func(tx *store.Tx) (err error) { cred, err = tx.Authenticate(bearer); return err })
	if err != nil {
		return nil, err
	}
	return &Caller{Tenant: cred.Tenant, Actions: cred.Actions, CredentialID: cred.ID, reads: &rd}, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := proto.NewEncoder(w).Encode(v); err != nil {
		fmt.Fprintln(w)
	}
}
