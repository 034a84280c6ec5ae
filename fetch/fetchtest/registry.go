package fetchtest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Repository is the one repository a Registry serves.
const Repository = "os/ubuntu"

// Registry is a small OCI distribution registry on loopback HTTPS: blobs of Repository
// need a bearer token from its /token endpoint, and are sent by a redirect to /storage/.
type Registry struct {
	*httptest.Server

	mu    sync.Mutex
	blobs map[string][]byte // by digest
	log   []string          // "METHOD path?query auth"
}

// NewRegistry starts a registry on 127.0.0.1, closed when the test ends. Its Client
// trusts its certificate.
func NewRegistry(t testing.TB) *Registry {
	r := &Registry{blobs: map[string][]byte{}}
	r.Server = httptest.NewTLSServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

// Put serves data as the blob with the given SHA-256 (64 hex digits) and returns its
// oci:// source.
func (r *Registry) Put(digest string, data []byte) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blobs[digest] = data
	return "oci://" + strings.TrimPrefix(r.URL, "https://") + "/" + Repository + "@sha256:" + digest
}

// Log lists the requests received, each as "METHOD path?query" and the Authorization
// header when there was one.
func (r *Registry) Log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	line := req.Method + " " + req.URL.RequestURI()
	if a := req.Header.Get("Authorization"); a != "" {
		line += " " + a
	}
	r.log = append(r.log, line)
	r.mu.Unlock()
	blobs := "/v2/" + Repository + "/blobs/sha256:"
	switch {
	case req.URL.Path == "/token":
		if req.URL.Query().Get("service") != "test-registry" || req.URL.Query().Get("scope") != "repository:"+Repository+":pull" {
			http.Error(w, "bad token request", http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, `{"token":"tok-1","expires_in":300}`)
	case strings.HasPrefix(req.URL.Path, blobs):
		if req.Header.Get("Authorization") != "Bearer tok-1" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+r.URL+`/token",service="test-registry",scope="repository:`+Repository+`:pull"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		d := strings.TrimPrefix(req.URL.Path, blobs)
		if _, ok := r.blob(d); !ok {
			http.Error(w, `{"errors":[{"code":"BLOB_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		http.Redirect(w, req, "/storage/"+d+"?sig=x", http.StatusTemporaryRedirect)
	case strings.HasPrefix(req.URL.Path, "/storage/"):
		b, ok := r.blob(strings.TrimPrefix(req.URL.Path, "/storage/"))
		if !ok {
			http.NotFound(w, req)
			return
		}
		http.ServeContent(w, req, "", time.Time{}, strings.NewReader(string(b)))
	default:
		http.NotFound(w, req)
	}
}

func (r *Registry) blob(digest string) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.blobs[digest]
	return b, ok
}
