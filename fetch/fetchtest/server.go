// Package fetchtest serves artifacts on loopback for tests of fetch and of those who
// fetch (the site cache, the ramdisk's deploy.image): Server over HTTP with ETags and
// ranges like a site cache, able to break connections part-way or to answer 404, so that
// resumes and fallbacks can be watched; Registry, an OCI registry over HTTPS that wants
// an anonymous bearer token; Counted, a host a fetch must not reach, counting the
// connections made to it; and NewResolver, a DNS server of the test's own names.
package fetchtest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Server serves named artifacts.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	files    map[string][]byte
	breaks   map[string][]int64
	stalls   map[string][]int64
	requests map[string][]string
	open     map[net.Conn]bool
}

// New starts a server on 127.0.0.1, closed when the test ends.
func New(t testing.TB) *Server {
	s := &Server{files: map[string][]byte{}, breaks: map[string][]int64{}, stalls: map[string][]int64{},
		requests: map[string][]string{}, open: map[net.Conn]bool{}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Config.ConnState = func(c net.Conn, state http.ConnState) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if state == http.StateClosed || state == http.StateHijacked {
			delete(s.open, c)
		} else {
			s.open[c] = true
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// OpenConns is the number of client connections open now, idle ones included.
func (s *Server) OpenConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// Put serves data at path and returns its URL.
func (s *Server) Put(path string, data []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[path] = data
	return s.URL + path
}

// BreakAfter makes the next answers for path stop after the given numbers of body
// bytes each, one answer per number, by closing the connection.
func (s *Server) BreakAfter(path string, counts ...int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.breaks[path] = append(s.breaks[path], counts...)
}

// StallAfter makes the next answers for path send the given numbers of body bytes
// each, one answer per number, and then nothing until the client gives up.
func (s *Server) StallAfter(path string, counts ...int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalls[path] = append(s.stalls[path], counts...)
}

// Requests lists the requests path received, each as its Range header ("" for none).
func (s *Server) Requests(path string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests[path]...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests[r.URL.Path] = append(s.requests[r.URL.Path], r.Header.Get("Range"))
	data, ok := s.files[r.URL.Path]
	limit, stall := int64(-1), false
	if b := s.breaks[r.URL.Path]; len(b) > 0 {
		limit, s.breaks[r.URL.Path] = b[0], b[1:]
	} else if b := s.stalls[r.URL.Path]; len(b) > 0 {
		limit, s.stalls[r.URL.Path], stall = b[0], b[1:], true
	}
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("ETag", fmt.Sprintf(`"%x-%d"`, len(data), data[len(data)/2]))
	if limit >= 0 {
		w = &breaker{ResponseWriter: w, left: limit, stall: stall, done: r.Context().Done()}
	}
	http.ServeContent(w, r, "", time.Unix(0, 0), bytes.NewReader(data))
}

// breaker closes the connection once its allowance of body bytes is spent, or with
// stall set goes silent until the client leaves.
type breaker struct {
	http.ResponseWriter
	left  int64
	stall bool
	done  <-chan struct{}
}

func (b *breaker) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, _ := b.ResponseWriter.Write(p)
	b.left -= int64(n)
	if b.left == 0 {
		if f, ok := b.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		if b.stall {
			<-b.done
		}
		panic(http.ErrAbortHandler)
	}
	return n, nil
}
