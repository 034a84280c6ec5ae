package cache

import (
	"net/http"
	"testing"

	"github.com/better-compute/better-compute/fetch/fetchtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestOCIBlobWithTokenFlow(t *testing.T) {
	reg := fetchtest.NewRegistry(t)
	a := newArtifact(30, 1<<20)
	source := reg.Put(a.digest, a.data)
	cfg := Config{RootCAs: reg.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	h := start(t, cfg)
	if err := h.c.SetDesired([]proto.CacheImage{image(a, source)}); err != nil {
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
	if diff := cmp.Diff(want, reg.Log()); diff != "" {
		t.Errorf("registry requests (-want +got):\n%s", diff)
	}
	if err := fileHashes(h.c.readyPath(a.digest), a.digest); err != nil {
		t.Error(err)
	}
}
