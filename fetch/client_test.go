package fetch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestOpen(t *testing.T) {
	const data = "0123456789abcdef"
	type result struct {
		Body      string
		Offset    int64
		Total     int64
		Validator string
		Requests  []string // each request's Range and If-Range
		Err       string
	}
	// wholeUnlessRanged answers the whole data to a request without a Range, and as ranged
	// answers to one with a Range.
	wholeUnlessRanged := func(ranged func(w http.ResponseWriter)) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Range") == "" {
				io.WriteString(w, data)
				return
			}
			ranged(w)
		}
	}
	for name, tc := range map[string]struct {
		offset    int64
		validator string
		answer    func(w http.ResponseWriter, r *http.Request)
		want      result
	}{
		"whole": {
			answer: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("ETag", `"e1"`)
				io.WriteString(w, data)
			},
			want: result{Body: data, Total: 16, Validator: `"e1"`, Requests: []string{"|"}},
		},
		"a resume": {
			offset: 10, validator: `"e1"`,
			answer: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("ETag", `"e1"`)
				w.Header().Set("Content-Range", "bytes 10-15/16")
				w.WriteHeader(http.StatusPartialContent)
				io.WriteString(w, data[10:])
			},
			want: result{Body: data[10:], Offset: 10, Total: 16, Validator: `"e1"`, Requests: []string{`bytes=10-|"e1"`}},
		},
		"a weak etag falls back to last-modified": {
			answer: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("ETag", `W/"e1"`)
				w.Header().Set("Last-Modified", "Tue, 01 Sep 2026 12:00:00 GMT")
				io.WriteString(w, data)
			},
			want: result{Body: data, Total: 16, Validator: "Tue, 01 Sep 2026 12:00:00 GMT", Requests: []string{"|"}},
		},
		"range ignored": {
			offset: 10, validator: `"e1"`,
			answer: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, data) },
			want:   result{Body: data, Total: 16, Requests: []string{`bytes=10-|"e1"`}},
		},
		"a 206 from elsewhere is retried whole": {
			offset: 10,
			answer: wholeUnlessRanged(func(w http.ResponseWriter) {
				w.Header().Set("Content-Range", "bytes 0-15/16")
				w.WriteHeader(http.StatusPartialContent)
				io.WriteString(w, data)
			}),
			want: result{Body: data, Total: 16, Requests: []string{"bytes=10-|", "|"}},
		},
		"416 when every byte is there": {
			offset: 16, validator: `"e1"`,
			answer: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Range", "bytes */16")
				w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			},
			want: result{Offset: 16, Total: 16, Validator: `"e1"`, Requests: []string{`bytes=16-|"e1"`}},
		},
		"416 for a longer partial is retried whole": {
			offset: 20,
			answer: wholeUnlessRanged(func(w http.ResponseWriter) {
				w.Header().Set("Content-Range", "bytes */16")
				w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			}),
			want: result{Body: data, Total: 16, Requests: []string{"bytes=20-|", "|"}},
		},
		"an error status": {
			answer: func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusForbidden) },
			want:   result{Requests: []string{"|"}, Err: "unexpected HTTP status 403 Forbidden"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var got result
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got.Requests = append(got.Requests, r.Header.Get("Range")+"|"+r.Header.Get("If-Range"))
				tc.answer(w, r)
			}))
			defer srv.Close()
			u, _ := url.Parse(srv.URL + "/a?secret=1")
			b, err := NewClient(srv.Client()).Open(context.Background(), Source{Kind: HTTPS, URL: u}, tc.offset, tc.validator)
			if err != nil {
				got.Err = err.Error()
				want := fmt.Sprintf("GET %s/a?...: %s", srv.URL, tc.want.Err)
				if got.Err != want {
					t.Errorf("error %q, want %q", got.Err, want)
				}
				got.Err = tc.want.Err
			} else {
				body, _ := io.ReadAll(b)
				b.Close()
				got.Body, got.Offset, got.Total, got.Validator = string(body), b.Offset, b.Total, b.Validator
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
