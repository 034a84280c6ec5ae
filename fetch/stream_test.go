package fetch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/better-compute/better-compute/fetch/fetchtest"
	"github.com/google/go-cmp/cmp"
)

func payload(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// stream opens a Stream over url with a default client.
func stream(t *testing.T, url string, opts StreamOptions) (*Stream, error) {
	t.Helper()
	src, err := Location(url)
	if err != nil {
		t.Fatal(err)
	}
	return NewClient(nil).Stream(context.Background(), src, opts)
}

func TestStreamResumes(t *testing.T) {
	data := payload(3 << 20)
	cases := map[string]struct {
		breaks     []int64
		wantRanges []string
		wantErr    bool
	}{
		"unbroken":          {nil, []string{""}, false},
		"one break":         {[]int64{1000}, []string{"", "bytes=1000-"}, false},
		"breaks in a row":   {[]int64{1 << 20, 5, 0, 0}, []string{"", "bytes=1048576-", "bytes=1048581-", "bytes=1048581-", "bytes=1048581-"}, false},
		"too many failures": {[]int64{10, 0, 0, 0}, []string{"", "bytes=10-", "bytes=10-", "bytes=10-"}, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := fetchtest.New(t)
			url := s.Put("/a", data)
			s.BreakAfter("/a", tc.breaks...)
			b, err := stream(t, url, StreamOptions{Retries: 3, RetryDelay: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			got, err := io.ReadAll(b)
			if tc.wantErr {
				if err == nil {
					t.Fatal("the stream did not give up")
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, data) {
					t.Fatalf("read %d bytes, not the artifact", len(got))
				}
			}
			if diff := cmp.Diff(tc.wantRanges, s.Requests("/a")); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStreamResumesAStall(t *testing.T) {
	data := payload(2 << 20)
	s := fetchtest.New(t)
	url := s.Put("/a", data)
	s.StallAfter("/a", 70000)
	b, err := stream(t, url, StreamOptions{RetryDelay: -1, StallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, %v; want the artifact", len(got), err)
	}
	if diff := cmp.Diff([]string{"", "bytes=70000-"}, s.Requests("/a")); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestStreamRefusesAChangedArtifact(t *testing.T) {
	s := fetchtest.New(t)
	url := s.Put("/a", payload(1<<20))
	s.BreakAfter("/a", 4096)
	b, err := stream(t, url, StreamOptions{RetryDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if _, err := io.ReadFull(b, buf); err != nil {
		t.Fatal(err)
	}
	changed := payload(1 << 20)
	changed[len(changed)/2]++ // a new ETag
	s.Put("/a", changed)
	if _, err := io.ReadAll(b); !errors.Is(err, ErrChanged) {
		t.Fatalf("read on: %v, want ErrChanged", err)
	}
}

func TestOpenNotFound(t *testing.T) {
	s := fetchtest.New(t)
	_, err := stream(t, s.URL+"/missing", StreamOptions{})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusNotFound {
		t.Fatalf("Stream: %v, want a 404 StatusError", err)
	}
}
