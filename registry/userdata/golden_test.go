package userdata

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var testPins = joinwire.Pins{
	ServingCA:      "sha256/3K9E2rMK5Smf+6KDh2APxc3kv+G9GBpVZQYUQZqcxQc=",
	JoinSigning:    "sha256/ChNRr/2SkMbCvP3THNUYZXc77bGFrcZ5ky5wJSjcpYE=",
	JoinEncryption: "sha256/9nQZM6Vs/u1c+lfUC0WggxOASERT7wGnQezSEinXN10=",
}

// testVars are the variables of the golden files: a presigned bcdUrl with & and %.
func testVars(pins joinwire.Pins) Vars {
	return Vars{
		NodeID:          "gpu_node-01",
		Hostname:        "gpu-node-01",
		JoinToken:       "bcj_0123456789abcdef.c2VjcmV0LXRva2VuLWJ5dGVzLWZvci10aGUtZ29sZGVu",
		ControlPlaneURL: "https://registry.example:7443",
		BcdURL:          "https://cache.example/bcd/v1.2.0/bcd?X-Amz-Credential=AKIA%2F20260901&X-Amz-Signature=0a1b2c",
		BcdSHA256:       "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Pins:            pins,
	}
}

func TestShippedTemplatesGolden(t *testing.T) {
	cases := map[string]struct {
		template Template
		pins     joinwire.Pins
	}{
		"bcd-host.yaml":        {TemplateFunc(cloudInit), testPins},
		"bcd-host-nopins.yaml": {TemplateFunc(cloudInit), joinwire.Pins{}},
		"bcd-host.ign":         {TemplateFunc(ignition), testPins},
		"bcd-host-nopins.ign":  {TemplateFunc(ignition), joinwire.Pins{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := tc.template.Render(testVars(tc.pins))
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, got)
		})
	}
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}
