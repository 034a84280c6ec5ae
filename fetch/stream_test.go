package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// stream opens a Stream over url from its first byte with a default client.
func stream(t *testing.T, url string, opts StreamOptions) (*Stream, error) {
	return streamFrom(t, url, 0, "", opts)
}

func streamFrom(t *testing.T, url string, offset int64, validator string, opts StreamOptions) (*Stream, error) {
	t.Helper()
	src, err := Location(url)
	if err != nil {
		t.Fatal(err)
	}
	return NewClient(nil).Stream(context.Background(), src, offset, validator, opts)
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

// A stream may start where a caller's copy ends; the answer says whether it did.
func TestStreamFromAnOffset(t *testing.T) {
	data := payload(1 << 20)
	for name, tc := range map[string]struct {
		validator  string
		wantOffset int64
	}{
		"no validator":     {"", 1000},
		"the validator":    {fmt.Sprintf(`"%x-%d"`, len(data), data[len(data)/2]), 1000},
		"another artifact": {`"other"`, 0},
	} {
		t.Run(name, func(t *testing.T) {
			s := fetchtest.New(t)
			url := s.Put("/a", data)
			b, err := streamFrom(t, url, 1000, tc.validator, StreamOptions{RetryDelay: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if b.Offset() != tc.wantOffset || b.Size() != int64(len(data)) {
				t.Fatalf("stream at %d of %d, want %d of %d", b.Offset(), b.Size(), tc.wantOffset, len(data))
			}
			got, err := io.ReadAll(b)
			if err != nil || !bytes.Equal(got, data[tc.wantOffset:]) {
				t.Fatalf("read %d bytes, %v; want the artifact from byte %d", len(got), err, tc.wantOffset)
			}
		})
	}
}

// With Restart, a resume answered with another artifact goes on from its first byte.
func TestStreamRestartsAChangedArtifact(t *testing.T) {
	s := fetchtest.New(t)
	url := s.Put("/a", payload(1<<20))
	s.BreakAfter("/a", 4096)
	var restarts []int64
	b, err := stream(t, url, StreamOptions{RetryDelay: -1, Restart: func(size int64, _ string) error {
		restarts = append(restarts, size)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := io.ReadFull(b, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	changed := payload(1<<20 + 1)
	s.Put("/a", changed)
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, changed) {
		t.Fatalf("read on: %d bytes, %v; want the new artifact whole", len(got), err)
	}
	if diff := cmp.Diff([]int64{int64(len(changed))}, restarts); diff != "" {
		t.Errorf("restarts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"", "bytes=4096-"}, s.Requests("/a")); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}
