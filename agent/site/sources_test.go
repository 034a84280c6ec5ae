package site

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// TestAllowedImages: the site fetches only from its image sources, whatever the pushed
// plan lists; each image left out is named at its source, and the rest apply.
func TestAllowedImages(t *testing.T) {
	digest := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	images := []proto.CacheImage{
		{Ref: "os@1", Digest: digest, Source: "https://images.example.com/os-1.raw"},
		{Ref: "meta@1", Digest: digest, Source: "https://127.0.0.2/latest/meta-data"},
		{Ref: "oci@1", Digest: digest, Source: "oci://registry.corp.example:5000/os@sha256:" + digest},
	}
	for name, tc := range map[string]struct {
		sources []string
		kept    []string
		paths   []string
	}{
		"no sources fetch nothing": {nil, nil, []string{"site.cacheImages[0].source", "site.cacheImages[1].source", "site.cacheImages[2].source"}},
		"one host":                 {[]string{"images.example.com"}, []string{"os@1"}, []string{"site.cacheImages[1].source", "site.cacheImages[2].source"}},
		"a domain and its port":    {[]string{"images.example.com", "*.corp.example:5000"}, []string{"os@1", "oci@1"}, []string{"site.cacheImages[1].source"}},
		"another port is not it":   {[]string{"images.example.com:8443", "*.corp.example"}, nil, []string{"site.cacheImages[0].source", "site.cacheImages[1].source", "site.cacheImages[2].source"}},
	} {
		t.Run(name, func(t *testing.T) {
			kept, err := allowedImages(proto.SiteSpec{CacheImages: images, ImageSources: tc.sources})
			var refs []string
			for _, img := range kept {
				refs = append(refs, img.Ref)
			}
			if diff := cmp.Diff(tc.kept, refs); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			var paths []string
			if err != nil {
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					if pe := proto.AsError(e); pe.Code != proto.InvalidConfig {
						t.Errorf("%v: want INVALID_CONFIG", e)
					} else {
						paths = append(paths, pe.Details.Path)
					}
				}
			}
			if diff := cmp.Diff(tc.paths, paths); diff != "" {
				t.Errorf("refused at (-want +got):\n%s", diff)
			}
		})
	}
}
