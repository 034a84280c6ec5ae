package bcdconf

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/google/go-cmp/cmp"
)

const pin = "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="

func sample() Config {
	return Config{Version: 1, Server: "https://registry.example:7443", AgentEndpoint: "registry.example:7444", NodeID: "node-1", Role: "node",
		AgentEndpoints: []string{"registry.example:7444", "registry-2.example:7444"},
		ServingCAPin:   pin, JoinSigningPin: pin, JoinEncryptionPin: pin}
}

func TestWriteAndLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bcd")
	b := Bundle{Config: sample(), Key: []byte("KEY"), Certificate: []byte("CERT"), AgentCA: []byte("ACA"), ServingCA: []byte("SCA"), JoinEncryptionKey: []byte("JWK")}
	if err := Write(dir, b); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sample(), got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	modes := map[string]os.FileMode{}
	for _, name := range []string{bcdargv.ConfigFile, KeyFile, CertFile, AgentCAFile, ServingCAFile, bcdargv.JoinEncryptionFile} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		modes[name] = st.Mode().Perm()
	}
	want := map[string]os.FileMode{bcdargv.ConfigFile: 0o644, KeyFile: 0o600, CertFile: 0o644, AgentCAFile: 0o644, ServingCAFile: 0o644, bcdargv.JoinEncryptionFile: 0o644}
	if diff := cmp.Diff(want, modes); diff != "" {
		t.Errorf("modes (-want +got):\n%s", diff)
	}
}

// TestEndpoints: the agent's endpoints are agentEndpoint, then the other replicas' of
// agentEndpoints, each once.
func TestEndpoints(t *testing.T) {
	want := []string{"registry.example:7444", "registry-2.example:7444"}
	if diff := cmp.Diff(want, sample().Endpoints()); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
}

// TestDecodeRefuses: every refusal of config.toml is INVALID_CONFIG at the key to fix.
func TestDecodeRefuses(t *testing.T) {
	good, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct{ data, path string }{
		"unknown key":                  {string(good) + "extra = 1\n", "extra"},
		"unknown nested key":           {string(good) + "[boot]\nport = 1\n", "boot"},
		"version 2":                    {strings.Replace(string(good), "version = 1", "version = 2", 1), "version"},
		"version as text":              {strings.Replace(string(good), "version = 1", "version = '1'", 1), "version"},
		"http server":                  {strings.Replace(string(good), "https://", "http://", 1), "server"},
		"bad role":                     {strings.Replace(string(good), "role = 'node'", "role = 'boss'", 1), "role"},
		"bad pin":                      {strings.Replace(string(good), "servingCaPin = 'sha256/", "servingCaPin = 'md5/", 1), "servingCaPin"},
		"short pin":                    {strings.Replace(string(good), "joinEncryptionPin = 'sha256/47DEQ", "joinEncryptionPin = 'sha256/", 1), "joinEncryptionPin"},
		"bad node id":                  {strings.Replace(string(good), "nodeId = 'node-1'", "nodeId = 'Node 1'", 1), "nodeId"},
		"not toml":                     {"version = ", "."},
		"bad endpoint":                 {strings.Replace(string(good), "'registry-2.example:7444'", "'registry-2.example'", 1), "agentEndpoints"},
		"metricsListen without a port": {string(good) + "metricsListen = '127.0.0.1'\n", "metricsListen"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if c.data == string(good) {
				t.Fatal("the case did not change the document")
			}
			_, err := Decode([]byte(c.data))
			if err == nil {
				t.Fatal("accepted")
			}
			errs := proto.Joined(err)
			if len(errs) != 1 {
				t.Fatalf("%d errors, want 1: %v", len(errs), err)
			}
			e := proto.AsError(errs[0])
			if e.Code != proto.InvalidConfig || e.Details.Path != c.path {
				t.Fatalf("%v: want INVALID_CONFIG at %s", err, c.path)
			}
		})
	}
}

// TestUnknownQuotedKeyNamed: an unknown key written quoted is named as the file writes
// it, so the operator can find it: the empty key "" (found by FuzzDecode: it was named
// as nothing, at no path), and "a.b", one key, not the table a's key b.
func TestUnknownQuotedKeyNamed(t *testing.T) {
	good, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	for data, want := range map[string]string{
		`"" = 0`:                            `""`,
		`"a.b" = 0`:                         `"a.b"`,
		`a.b = 0`:                           `a.b`,
		"[\"my table\"]\n'' = 'x'":          `"my table"`,
		string(good) + "\n[boot]\n\"\" = 1": `boot`,
	} {
		_, err := Decode([]byte(data))
		errs := proto.Joined(err)
		if len(errs) != 1 {
			t.Fatalf("%q: %d errors, want 1: %v", data, len(errs), err)
		}
		e := proto.AsError(errs[0])
		if e.Code != proto.InvalidConfig || e.Details.Path != want || !strings.Contains(e.Message, "unknown key "+want+":") {
			t.Errorf("%q: %v at %q, want INVALID_CONFIG naming the unknown key %s", data, err, e.Details.Path, want)
		}
	}
}

// TestDecodeTellsEveryProblem: a config.toml with several wrong keys is refused once for
// each, at its key, so one edit fixes them all.
func TestDecodeTellsEveryProblem(t *testing.T) {
	_, err := Decode([]byte("version = 1\nserver = 'https://x'\nnodeId = 'n'\nrole = 'node'\n"))
	var paths []string
	for _, e := range proto.Joined(err) {
		if proto.CodeOf(e) != proto.InvalidConfig {
			t.Errorf("%v: want INVALID_CONFIG", e)
		}
		paths = append(paths, proto.AsError(e).Details.Path)
	}
	if want := []string{"servingCaPin", "joinSigningPin", "joinEncryptionPin"}; !slices.Equal(paths, want) {
		t.Errorf("refused at %v, want %v", paths, want)
	}
}

// TestLoadNamesTheFile: Load's refusals keep their code and key, and name the file.
func TestLoadNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, bcdargv.ConfigFile), []byte("version = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir)
	errs := proto.Joined(err)
	if len(errs) < 2 {
		t.Fatalf("%v: want one error for each wrong key", err)
	}
	for _, e := range errs {
		pe := proto.AsError(e)
		if pe.Code != proto.InvalidConfig || pe.Details.Path == "" || !strings.HasPrefix(pe.Message, filepath.Join(dir, bcdargv.ConfigFile)+": ") {
			t.Errorf("%v: want INVALID_CONFIG at a key, naming the file", e)
		}
	}
}

// FuzzDecode reads any config.toml: a refusal is INVALID_CONFIG at a path; an accepted one passes Check and encodes to a document
// that decodes to the same config.
func FuzzDecode(f *testing.F) {
	good, err := Encode(sample())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(strings.Replace(string(good), "role = 'node'", "role = 'site'\nsite = 'lab-1'", 1)))
	f.Add([]byte("version = 1\nserver = 'https://x'\nnodeId = 'n'\nrole = 'node'\n"))
	f.Add([]byte("version = 1\nversion = 1\n"))
	f.Add([]byte("version = '1'\n[boot]\nport = 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode(data)
		if err != nil {
			for _, e := range proto.Joined(err) {
				if pe := proto.AsError(e); pe.Code != proto.InvalidConfig || pe.Details.Path == "" {
					t.Fatalf("refused with %v: want INVALID_CONFIG with the key's path", e)
				}
			}
			return
		}
		if err := c.Check(); err != nil {
			t.Fatalf("Decode accepted what Check refuses: %v", err)
		}
		text, err := Encode(c)
		if err != nil {
			t.Fatalf("Encode of an accepted config: %v", err)
		}
		again, err := Decode(text)
		if err != nil {
			t.Fatalf("%s does not decode: %v", text, err)
		}
		if diff := cmp.Diff(c, again); diff != "" {
			t.Fatalf("config changes through Encode (-first +again):\n%s", diff)
		}
	})
}

// TestMetricsListenIsKept: a config.toml the operator gave metricsListen decodes with it,
// and bcd writes it back when it saves the file.
func TestMetricsListenIsKept(t *testing.T) {
	good, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode(append(good, "metricsListen = '127.0.0.1:9465'\n"...))
	if err != nil || c.MetricsListen != "127.0.0.1:9465" {
		t.Fatalf("decoded %+v, %v", c, err)
	}
	again, err := Encode(c)
	if err != nil || !strings.Contains(string(again), "metricsListen = '127.0.0.1:9465'") {
		t.Fatalf("encoded %s, %v", again, err)
	}
}
