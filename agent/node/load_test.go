package node

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// loadSaved writes doc as the config directory's nodespec.json and loads it as node
// "nd_1"'s agent does at its start.
func loadSaved(t *testing.T, dir string, doc []byte) (*agent, proto.NodeSpec, error) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, StateFile), doc, 0o600); err != nil {
		t.Fatal(err)
	}
	a := newAgent(dir, slog.New(slog.DiscardHandler))
	spec, err := a.load("nd_1")
	return a, spec, err
}

// TestInvalidSavedSpecIsRefused: a nodespec.json of this node the session would never
// have applied (a host unit of no name, a negative generation) fails the agent's start
// INVALID_CONFIG at the field, naming the file. Before, it was loaded as it was: its
// unit of no name went to the converger, its generation of -3 into the agent's hello.
func TestInvalidSavedSpecIsRefused(t *testing.T) {
	for doc, path := range map[string]string{
		`{"node":"nd_1","role":"node","generation":2,"host":[{"unit":"sysctl"},{"unit":""}]}`: "host[1].unit",
		`{"node":"nd_1","role":"node","generation":-3}`:                                       "generation",
		`{"node":"nd_1","role":"nobody","generation":1}`:                                      "role",
	} {
		dir := t.TempDir()
		_, spec, err := loadSaved(t, dir, []byte(doc))
		if err == nil {
			t.Errorf("%s loads %+v; want INVALID_CONFIG at %s", doc, spec, path)
			continue
		}
		if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != path || !strings.Contains(e.Message, filepath.Join(dir, StateFile)) {
			t.Errorf("%s loads %+v, %v; want INVALID_CONFIG at %s naming the file", doc, spec, err, path)
		}
	}
}

// FuzzLoadNodeSpec loads any nodespec.json as `bcd node` does at its start. It is
// refused INVALID_CONFIG naming the file; or it is another node's, and no spec is taken;
// or the spec taken is one the session would apply (it is valid and this node's), and
// saved and loaded again it is the same spec, encoded the same.
func FuzzLoadNodeSpec(f *testing.F) {
	for _, s := range []string{
		`{"node":"nd_1","role":"node","generation":7,"labels":{"cluster":"old"}}`,
		`{"node":"nd_old","role":"node","generation":7,"labels":{"cluster":"old"}}`,
		`{"node":"nd_1","role":"node","generation":3,"host":[{"unit":"sysctl","when":"gpu == h100","settings":{"vm.swappiness": 1}}],"drivers":{"power":{"driver":"redfish"}}}`,
		`{"node":"nd_1","role":"node","generation":2,"host":[{"unit":""}]}`,
		`{"node":"nd_1","role":"node","generation":-1}`,
		`{"node":"nd_1","role":"site","site":{"knownMacs":["52:54:00:ab:cd:ef","52:54:00:ab:cd:f0"]}}`,
		`{"node":"nd_1"}`, `{}`, `null`, `not json`, ``,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	state := filepath.Join(dir, StateFile)
	f.Fuzz(func(t *testing.T, doc []byte) {
		a, spec, err := loadSaved(t, dir, doc)
		if err != nil {
			if e := proto.AsError(err); e.Code != proto.InvalidConfig || !strings.Contains(e.Message, state) {
				t.Fatalf("refused %v: not INVALID_CONFIG naming %s", err, state)
			}
			return
		}
		if spec.Node != "nd_1" {
			if spec.Node != "" || spec.Generation != 0 || spec.Role != "" || spec.Labels != nil || spec.Drivers != nil || spec.Host != nil || spec.Site != nil {
				t.Fatalf("took %+v, a spec of no node or of another", spec)
			}
			return
		}
		if err := spec.Validate(); err != nil {
			t.Fatalf("took a spec the session would refuse: %v", err)
		}
		want, err := proto.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.save(spec); err != nil {
			t.Fatal(err)
		}
		again, err := a.load("nd_1")
		if err != nil {
			t.Fatalf("%s saved does not load: %v", want, err)
		}
		if got, err := proto.Marshal(again); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("saved as %s, loaded again as %s (%v)", want, got, err)
		}
	})
}
