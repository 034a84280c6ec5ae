package api

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/proto"

	"github.com/better-compute/better-compute/testkit/docstable"
)

// TestClientConfigDocumented: the README's table of the CLI config names every field of
// ClientConfig and no other.
func TestClientConfigDocumented(t *testing.T) {
	docstable.Config{Doc: "../../README.md", Heading: "### The CLI config", Column: "field", Tag: "json"}.Check(t, ClientConfig{})
}

// TestClientConfigProblemsNameTheirField: a CLI config edited by hand without one of the
// fields the README says a config needs, or with another version, is INVALID_CONFIG at
// that field, the path the CLI prints beside the message.
func TestClientConfigProblemsNameTheirField(t *testing.T) {
	for field, text := range map[string]string{
		"version":    `{"server": "https://registry.example:7443", "servingCA": "x", "credential": "c"}`,
		"server":     `{"version": 1, "servingCA": "x", "credential": "c"}`,
		"credential": `{"version": 1, "server": "https://registry.example:7443", "servingCA": "x"}`,
	} {
		path := filepath.Join(t.TempDir(), "admin.conf")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadClientConfig(path)
		if e := proto.AsError(err); err == nil || e.Code != proto.InvalidConfig || e.Details.Path != field {
			t.Errorf("a config without %s: %v at %q, want INVALID_CONFIG at %s", field, err, e.Details.Path, field)
		}
	}
}
