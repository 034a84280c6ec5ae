package cache

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// registry is a small OCI distribution registry on loopback: blobs need a bearer token
// from its /token endpoint, and are sent by a redirect to /storage/.
type registry struct {
	srv   *httptest.Server
	blobs map[string][]byte // by digest

	mu  sync.Mutex
	log []string // "METHOD path?query auth"
}

func newRegistry(t *testing.T) *registry {
	r := &registry{blobs: map[string][]byte{}}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *registry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	line := req.Method + " " + req.URL.RequestURI()
	if a := req.Header.Get("Authorization"); a != "" {
		line += " " + a
	}
	r.log = append(r.log, line)
	r.mu.Unlock()
	switch {
	case req.URL.Path == "/token":
		if req.URL.Query().Get("service") != "test-registry" || req.URL.Query().Get("scope") != "repository:os/ubuntu:pull" {
			http.Error(w, "bad token request", http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, `{"token":"tok-1","expires_in":300}`)
	case strings.HasPrefix(req.URL.Path, "/v2/os/ubuntu/blobs/sha256:"):
		if req.Header.Get("Authorization") != "Bearer tok-1" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+r.srv.URL+`/token",service="test-registry",scope="repository:os/ubuntu:pull"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		d := strings.TrimPrefix(req.URL.Path, "/v2/os/ubuntu/blobs/sha256:")
		if _, ok := r.blobs[d]; !ok {
			http.Error(w, `{"errors":[{"code":"BLOB_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		http.Redirect(w, req, "/storage/"+d+"?sig=x", http.StatusTemporaryRedirect)
	case strings.HasPrefix(req.URL.Path, "/storage/"):
		b, ok := r.blobs[strings.TrimPrefix(req.URL.Path, "/storage/")]
		if !ok {
			http.NotFound(w, req)
			return
		}
		http.ServeContent(w, req, "", time.Time{}, strings.NewReader(string(b)))
	default:
		http.NotFound(w, req)
	}
}

func TestOCIBlobWithTokenFlow(t *testing.T) {
	reg := newRegistry(t)
	a := newArtifact(30, 1<<20)
	reg.blobs[a.digest] = a.data
	host := strings.TrimPrefix(reg.srv.URL, "https://")
	cfg := Config{RootCAs: reg.srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	h := start(t, cfg)
	if err := h.c.SetDesired([]proto.CacheImage{image(a, "oci://"+host+"/os/ubuntu@sha256:"+a.digest)}); err != nil {
		t.Fatal(err)
	}
	h.waitState(a.digest, proto.CacheReady)
	blob := "/v2/os/ubuntu/blobs/sha256:" + a.digest
	want := []string{
		"GET " + blob,
		"GET /token?scope=repository%3Aos%2Fubuntu%3Apull&service=test-registry",
		"GET " + blob + " Bearer tok-1",
		"GET /storage/" + a.digest + "?sig=x Bearer tok-1", // same host: the client keeps the header
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if diff := cmp.Diff(want, reg.log); diff != "" {
		t.Errorf("registry requests (-want +got):\n%s", diff)
	}
	if err := fileHashes(h.c.readyPath(a.digest), a.digest); err != nil {
		t.Error(err)
	}
}
