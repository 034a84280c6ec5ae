// Package redfishsim is a Redfish service that behaves like a BMC, for tests: a
// loopback HTTPS server with one system whose power changes some time after a reset,
// a boot override that a boot consumes, a virtual CD on its manager, session and basic
// authentication, and, as configured, the gaps of real BMCs (reset types it does not
// perform, no virtual media, an OS that ignores a graceful shutdown), each answered the
// way a BMC answers: an HTTP error with a Redfish extended message.
package redfishsim

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"

	"github.com/better-compute/better-compute/clock"
)

// Advertise is how the service lists the reset types it performs.
type Advertise int

// The ways to list reset types.
const (
	// InAllowableValues lists them in the Reset action's ResetType@Redfish.AllowableValues.
	InAllowableValues Advertise = iota
	// InActionInfo lists them in a ResetActionInfo resource the action links to.
	InActionInfo
	// Unlisted lists nothing: a client learns by trying.
	Unlisted
)

// Config shapes the simulated BMC. Its zero value (with a user name and password) is a
// well-behaved BMC that offers everything.
type Config struct {
	// Username and Password are the only login the service accepts.
	Username, Password string
	// ResetTypes are the reset types the system performs; nil is all of On, ForceOff,
	// GracefulShutdown, ForceRestart, GracefulRestart, PowerCycle and Nmi.
	ResetTypes []string
	// Advertise is how the reset types are listed.
	Advertise Advertise
	// BootTargets are the boot override targets the system accepts; nil is None, Pxe,
	// Hdd, Cd, UefiHttp and BiosSetup.
	BootTargets []string
	// BootMode is the boot override mode before any change: UEFI when empty.
	BootMode string
	// NoVirtualMedia leaves the manager without virtual media.
	NoVirtualMedia bool
	// Delay is how long a power transition takes; the system reports PoweringOn or
	// PoweringOff meanwhile, and refuses another reset with 409.
	Delay time.Duration
	// PowerState is the state at start: Off when empty.
	PowerState string
	// IgnoreGracefulShutdown makes the OS ignore GracefulShutdown: the system stays On.
	IgnoreGracefulShutdown bool
}

// Server is a running simulated BMC.
type Server struct {
	// URL is https://127.0.0.1:PORT.
	URL string
	// Certificate is the server's self-signed certificate.
	Certificate *x509.Certificate

	cfg  Config
	http *httptest.Server

	mu       sync.Mutex
	power    power
	boot     BootOverride
	media    Media
	sessions map[string]string // token -> session id
	nextID   int
	resets   []string
	answers  map[string]answer // "METHOD path" -> what the request is answered instead
	boots    []string
}

// New starts a simulated BMC on a loopback port. Close it when done.
func New(cfg Config) *Server {
	if cfg.ResetTypes == nil {
		cfg.ResetTypes = []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "PowerCycle", "Nmi"}
	}
	if cfg.BootTargets == nil {
		cfg.BootTargets = []string{"None", "Pxe", "Hdd", "Cd", "UefiHttp", "BiosSetup"}
	}
	if cfg.BootMode == "" {
		cfg.BootMode = "UEFI"
	}
	if cfg.PowerState == "" {
		cfg.PowerState = "Off"
	}
	s := &Server{
		cfg:      cfg,
		power:    power{state: cfg.PowerState},
		boot:     BootOverride{Target: "None", Enabled: "Disabled", Mode: cfg.BootMode},
		sessions: map[string]string{},
	}
	cert := SelfSigned()
	s.http = httptest.NewUnstartedServer(s.answering(s.routes()))
	s.http.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	// A client that refuses the certificate is the test's business, not the log's.
	s.http.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.http.StartTLS()
	s.URL = s.http.URL
	s.Certificate = cert.Leaf
	return s
}

// Close stops the server.
func (s *Server) Close() { s.http.Close() }

// routes is the service's resource tree.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	root := func(w http.ResponseWriter, r *http.Request) { write(w, http.StatusOK, s.serviceRoot()) }
	mux.HandleFunc("GET /redfish/v1", root)
	mux.HandleFunc("GET /redfish/v1/{$}", root)
	mux.HandleFunc("POST /redfish/v1/SessionService/Sessions", s.login)
	mux.HandleFunc("DELETE /redfish/v1/SessionService/Sessions/{id}", s.authed(s.logout))
	mux.HandleFunc("GET /redfish/v1/Systems", s.authed(s.resource(func() any { return collection("/redfish/v1/Systems", systemPath) })))
	mux.HandleFunc("GET "+systemPath, s.authed(s.resource(s.system)))
	mux.HandleFunc("PATCH "+systemPath, s.authed(s.patchSystem))
	mux.HandleFunc("POST "+systemPath+"/Actions/ComputerSystem.Reset", s.authed(s.reset))
	mux.HandleFunc("GET "+systemPath+"/ResetActionInfo", s.authed(s.resetActionInfo))
	mux.HandleFunc("GET /redfish/v1/Managers", s.authed(s.resource(func() any { return collection("/redfish/v1/Managers", managerPath) })))
	mux.HandleFunc("GET "+managerPath, s.authed(s.resource(s.manager)))
	mux.HandleFunc("GET "+managerPath+"/VirtualMedia", s.authed(s.withMedia(s.resource(s.mediaCollection))))
	mux.HandleFunc("GET "+managerPath+"/VirtualMedia/{id}", s.authed(s.withMedia(s.mediaResource)))
	mux.HandleFunc("POST "+cdPath+"/Actions/VirtualMedia.InsertMedia", s.authed(s.withMedia(s.insertMedia)))
	mux.HandleFunc("POST "+cdPath+"/Actions/VirtualMedia.EjectMedia", s.authed(s.withMedia(s.ejectMedia)))
	s.inventoryRoutes(mux)
	mux.HandleFunc("/", s.authed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "The resource at the URI '"+r.URL.Path+"' was not found.")
	}))
	return mux
}

// answer is a response given as it is, a stream, or a redirect to location.
type answer struct {
	status   int
	body     []byte
	stream   *Stream
	location string
}

// Stream is an answer generated as it is sent, the way a hostile or broken BMC answers:
// Head, then Unit over and over until Size bytes in all, never held whole in memory.
type Stream struct {
	Head, Unit []byte
	// Size is the bytes of the body in all; negative is without end (until the client
	// goes away or the server closes).
	Size int64
	// Delay is how long the service waits before it sends the status and headers.
	Delay time.Duration
	// Every is how long it waits before each Unit: a body that trickles.
	Every time.Duration
}

// AnswerStream makes the service answer a request of method for path with status and
// the body st generates (no Content-Length), without performing it.
func (s *Server) AnswerStream(method, path string, status int, st Stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Head, st.Unit = slices.Clone(st.Head), slices.Clone(st.Unit)
	s.setAnswer(method, path, answer{status: status, stream: &st})
}

// send writes st to w until its size, or until the client goes away: then it abandons
// the answer (gone).
func (st *Stream) send(w http.ResponseWriter, r *http.Request, status int) {
	// The server notices a client that went away only once the request's body is read.
	_, _ = io.Copy(io.Discard, r.Body)
	if clock.Sleep(r.Context(), clock.Real{}, st.Delay) != nil {
		gone()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	left := st.Size
	if left < 0 {
		left = math.MaxInt64
	}
	write := func(b []byte) (more bool) {
		b = b[:min(int64(len(b)), left)]
		n, err := w.Write(b)
		left -= int64(n)
		if err != nil {
			gone()
		}
		return left > 0
	}
	if !write(st.Head) || len(st.Unit) == 0 {
		return
	}
	// A body that does not trickle is sent 64 KiB at a time: a write a unit would be
	// slow to send hundreds of MiB.
	chunk := st.Unit
	if st.Every == 0 {
		chunk = bytes.Repeat(st.Unit, max(1, 64<<10/len(st.Unit)))
	}
	for {
		if st.Every > 0 {
			w.(http.Flusher).Flush()
			if clock.Sleep(r.Context(), clock.Real{}, st.Every) != nil {
				gone()
			}
		}
		if !write(chunk) {
			return
		}
	}
}

// gone abandons an answer whose client went away, as a stalled BMC does: the server
// closes the connection without finishing the response. Returning would finish it (a
// status line and an empty body, or the end of a chunked body), and Go's HTTP client,
// which tells the server it goes (a TLS close_notify) a moment before it closes the
// connection, could read that in the moment between as a whole answer, not the timeout
// it asked for (TestStreamClientGoneGetsNothing).
func gone() { panic(http.ErrAbortHandler) }

// Answer makes the service answer a GET of path, its service root or any resource, with
// status and body as they are, the way a broken or hostile BMC answers; a nil body puts
// the simulated resource back.
func (s *Server) Answer(path string, status int, body []byte) {
	s.AnswerRequest(http.MethodGet, path, status, body)
}

// AnswerRequest makes the service answer a request of method for path (a PATCH of the
// system, a POST of an action) with status and body as they are, without performing it;
// a nil body puts the simulated behaviour back.
func (s *Server) AnswerRequest(method, path string, status int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if body == nil {
		delete(s.answers, answerKey(method, path))
		return
	}
	s.setAnswer(method, path, answer{status: status, body: slices.Clone(body)})
}

// Redirect makes the service answer a GET of path with a redirect to location, which may
// be on another host.
func (s *Server) Redirect(path, location string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setAnswer(http.MethodGet, path, answer{status: http.StatusFound, location: location})
}

// setAnswer keeps a for requests of method for path. The caller holds mu.
func (s *Server) setAnswer(method, path string, a answer) {
	if s.answers == nil {
		s.answers = map[string]answer{}
	}
	s.answers[answerKey(method, path)] = a
}

// answerKey is the key of the answers set for requests of method for path.
func answerKey(method, path string) string { return method + " " + path }

// answering serves what Answer, AnswerRequest, AnswerStream and Redirect set before the resource tree.
func (s *Server) answering(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		a, ok := s.answers[answerKey(r.Method, r.URL.Path)]
		s.mu.Unlock()
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		switch {
		case a.location != "":
			http.Redirect(w, r, a.location, a.status)
			return
		case a.stream != nil:
			a.stream.send(w, r, a.status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = w.Write(a.body)
	})
}

func (s *Server) serviceRoot() map[string]any {
	return map[string]any{
		"@odata.id":      "/redfish/v1/",
		"@odata.type":    "#ServiceRoot.v1_15_0.ServiceRoot",
		"Id":             "RootService",
		"Name":           "Root Service",
		"RedfishVersion": "1.15.0",
		"UUID":           "92384634-2938-2342-8820-489239905423",
		"Systems":        link("/redfish/v1/Systems"),
		"Managers":       link("/redfish/v1/Managers"),
		"SessionService": link("/redfish/v1/SessionService"),
		"Links":          map[string]any{"Sessions": link("/redfish/v1/SessionService/Sessions")},
	}
}

// resource serves what body builds, under the lock.
func (s *Server) resource(body func() any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		write(w, http.StatusOK, body())
	}
}

func link(path string) map[string]any { return map[string]any{"@odata.id": path} }

func collection(path string, members ...string) map[string]any {
	list := make([]any, len(members))
	for i, m := range members {
		list[i] = link(m)
	}
	return map[string]any{"@odata.id": path, "Name": "Collection", "Members": list, "Members@odata.count": len(list)}
}

func write(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// Resets returns the reset types the service performed, in order.
func (s *Server) Resets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.resets)
}

// Boots returns what the system booted from at each power-on, in order: the boot
// override's target while one is enabled, else Hdd.
func (s *Server) Boots() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle(time.Now())
	return slices.Clone(s.boots)
}

// Sessions returns how many sessions are open.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}
