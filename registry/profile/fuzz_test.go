package profile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// FuzzDefine checks that Define never panics, that every refusal is a *proto.Error of
// INVALID_CONFIG with a path, that Check agrees with Define, and that an accepted
// profile defines again from its own document and renders.
func FuzzDefine(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.json")
	shipped, _ := filepath.Glob("shipped/*.json")
	for _, name := range append(seeds, shipped...) {
		doc, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(doc)
	}
	f.Add([]byte(`{"id": "t", "version": 1.5, "target": "vps", "steps": [{"use": "x", "with": {"fromStep": "steps[0]"}}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		p, err := Define(doc)
		issues := Check(doc)
		if err != nil {
			var e *proto.Error
			if !errors.As(err, &e) || e.Code != proto.InvalidConfig || e.Details.Path == "" {
				t.Fatalf("error %#v is not an INVALID_CONFIG *proto.Error with a path", err)
			}
			if len(issues) == 0 || issues[0].Path != e.Details.Path {
				t.Fatalf("Check %v disagrees with Define %v", issues, err)
			}
			for _, i := range issues {
				if i.Path == "" || i.Message == "" || i.Code != proto.InvalidConfig {
					t.Fatalf("issue %+v lacks a path, a message or the code", i)
				}
			}
			return
		}
		if len(issues) > 0 {
			t.Fatalf("Define accepted what Check refuses: %v", issues)
		}
		again, err := Define(p.Document())
		if err != nil {
			t.Fatalf("the document of an accepted profile is refused: %v", err)
		}
		Render(again)
	})
}
