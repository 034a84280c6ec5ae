// Package api is the registry's operator plane: an HTTPS JSON API of methods called as
// `POST /v1/<service>.<method>` with a bearer credential, and the client the CLI uses.
// Every error is a proto.Error; every list pages at most 200 items with a cursor.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// maxBody bounds a request body.
const maxBody = 4 << 20

// Method is one API method: the action it needs and what it does.
type Method struct {
	// Action is the action the caller must hold; empty lets any authenticated caller in.
	Action string
	// HostOnly methods answer only on the admin socket.
	HostOnly bool
	// Public methods take no bearer credential: their body carries what authenticates
	// them (join.join's sealed token).
	Public bool
	// Call decodes the body and does the work.
	Call func(ctx context.Context, c *Caller, body []byte) (any, error)
}

// Server routes API calls to methods.
type Server struct {
	store   *store.Store
	log     *slog.Logger
	methods map[string]Method
}

// NewServer makes a server over st with no methods yet.
func NewServer(st *store.Store, log *slog.Logger) *Server {
	return &Server{store: st, log: log, methods: map[string]Method{}}
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

// DecodeStrict decodes one JSON value into v, refusing unknown fields and trailing data,
// with INVALID_INPUT naming the offending field.
func DecodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	}
	if err == nil {
		return nil
	}
	e := proto.Errorf(proto.InvalidInput, "request body: %v", err)
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		e = proto.Errorf(proto.InvalidInput, "%s must be %s, not %s", typeErr.Field, typeErr.Type, typeErr.Value).WithPath(typeErr.Field)
	} else if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field = strings.Trim(field, `"`)
		e = proto.Errorf(proto.InvalidInput, "unknown field %q", field).WithPath(field)
	}
	return e
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
	err := func() error {
		if r.Method != http.MethodPost || !ok {
			return proto.Errorf(proto.NotFound, "no such endpoint: call POST /v1/<service>.<method>")
		}
		m, known := s.methods[name]
		if !known {
			return proto.Errorf(proto.NotFound, "no such method %q", name)
		}
		var err error
		if m.Public {
			caller = &Caller{}
		} else if caller, err = s.authenticate(r, host); err != nil {
			return err
		}
		if m.HostOnly && !caller.Host {
			return proto.Errorf(proto.Forbidden, "%s is only available on the registry's host, through its admin socket", name)
		}
		if m.Action != "" && !caller.Can(m.Action) {
			return proto.Errorf(proto.Forbidden, "%s needs the action %s, which this credential does not have", name, m.Action)
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			return proto.Errorf(proto.InvalidInput, "request body: %v", err)
		}
		result, err = m.Call(r.Context(), caller, body)
		return err
	}()
	attrs := []any{"method", name, "duration", time.Since(start)}
	if caller != nil && caller.CredentialID != "" {
		attrs = append(attrs, "tenant", caller.Tenant, "credential", caller.CredentialID)
	}
	if err != nil {
		e := proto.AsError(err)
		attrs = append(attrs, "code", e.Code)
		if e.Code == proto.Internal {
			s.log.Error("api call failed", append(attrs, "err", err)...)
			e = proto.Errorf(proto.Internal, "internal error: the registry's log has the details")
		} else {
			s.log.Info("api call", attrs...)
		}
		writeJSON(w, e.Code.HTTPStatus(), e)
		return
	}
	s.log.Info("api call", attrs...)
	writeJSON(w, http.StatusOK, result)
}

func (s *Server) authenticate(r *http.Request, host bool) (*Caller, error) {
	if host {
		return &Caller{Tenant: store.RootTenant, Actions: []string{ActionAll}, CredentialID: "host", Host: true}, nil
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, proto.Errorf(proto.Unauthenticated, "no credential: send Authorization: Bearer <credential>, or point the CLI at a config file with --config")
	}
	var cred store.Credential
	err := s.store.View(func(tx *store.Tx) (err error) { cred, err = tx.Authenticate(bearer); return err })
	if err != nil {
		return nil, err
	}
	return &Caller{Tenant: cred.Tenant, Actions: cred.Actions, CredentialID: cred.ID}, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		fmt.Fprintln(w)
	}
}
