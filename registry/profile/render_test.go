package profile

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/render")

// TestRender compares the rendering of the example and of every shipped profile with its
// golden file.
func TestRender(t *testing.T) {
	example, err := Define([]byte(specExample(t)))
	if err != nil {
		t.Fatal(err)
	}
	every, err := Define([]byte(readFile(t, "testdata/every-step.json")))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append([]*Profile{example, every}, Shipped()...) {
		name := p.ID() + "@" + strconv.Itoa(p.Version())
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(Render(p), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", "render", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if !bytes.Equal(want, got) {
				t.Errorf("Render differs from %s (run with -update after checking the change):\n%s", golden, got)
			}
		})
	}
}
