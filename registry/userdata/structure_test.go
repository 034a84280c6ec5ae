package userdata

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/better-compute/better-compute/proto/joinwire"
	v34 "github.com/coreos/ignition/v2/config/v3_4"
	"github.com/coreos/ignition/v2/config/v3_4/types"
	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

// hostile are values that would change a document's structure or its commands if they
// were pasted in as they are.
var hostile = map[string]string{
	"double quote":      `a"b`,
	"single quote":      `a'b`,
	"closing quote":     `'; echo INJECTED >> "$LOG"; '`,
	"newline":           "a\nhostname: evil",
	"carriage return":   "a\rb",
	"yaml key":          "a: b",
	"yaml comment":      "a #b",
	"yaml flow":         "a], [evil",
	"yaml anchor":       "&x *x",
	"yaml tag":          "!!binary AAAA",
	"placeholder":       "{{joinToken}}",
	"command subst":     "$(echo INJECTED >> \"$LOG\")",
	"backticks":         "`echo INJECTED >> \"$LOG\"`",
	"semicolon":         "a; echo INJECTED >> \"$LOG\"",
	"ampersand percent": "a&b%c%%d",
	"systemd specifier": "%n%i%%",
	"variable":          "${LOG}$LOG",
	"backslash":         `a\nb\\`,
	"line separator":    "a\u2028b\u2029c\u0085d",
	"tab":               "a\tb",
	"bom":               "\ufeffa",
	"noncharacters":     "a\ufffe\uffffb",
	"non-ascii":         "ü→🙂",
	"leading dash":      "- a",
	"empty-ish":         " ",
}

// cloudConfig is the shape bcd-host.yaml.hbs must have, and nothing more.
type cloudConfig struct {
	Hostname   string `yaml:"hostname"`
	WriteFiles []struct {
		Path        string `yaml:"path"`
		Permissions string `yaml:"permissions"`
		Content     string `yaml:"content"`
	} `yaml:"write_files"`
	Runcmd [][]string `yaml:"runcmd"`
}

// parseCloudConfig reads a rendered cloud-init document, refusing any field the
// template does not write.
func parseCloudConfig(t *testing.T, doc []byte) cloudConfig {
	t.Helper()
	if !bytes.HasPrefix(doc, []byte("#cloud-config\n")) {
		t.Fatalf("the document does not start with #cloud-config:\n%s", doc)
	}
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	var cc cloudConfig
	if err := dec.Decode(&cc); err != nil {
		t.Fatalf("parse the rendered YAML: %v\n%s", err, doc)
	}
	var more any
	if err := dec.Decode(&more); err == nil {
		t.Fatalf("the document holds a second YAML document:\n%s", doc)
	}
	return cc
}

// wantCloudConfig is what parsing bcd-host.yaml.hbs rendered with v must give.
func wantCloudConfig(v Vars) cloudConfig {
	cc := cloudConfig{Hostname: v.Hostname}
	cc.WriteFiles = append(cc.WriteFiles,
		struct {
			Path        string `yaml:"path"`
			Permissions string `yaml:"permissions"`
			Content     string `yaml:"content"`
		}{bcdargv.TokenFile, "0600", v.JoinToken},
		struct {
			Path        string `yaml:"path"`
			Permissions string `yaml:"permissions"`
			Content     string `yaml:"content"`
		}{"/etc/systemd/system/bcd.service", "0644", nodeUnit()})
	cc.Runcmd = [][]string{
		{"sh", "-c", downloadCommand(v.BcdURL, v.BcdSHA256)},
		bcdargv.Join(v.ControlPlaneURL, v.NodeID, v.Pins),
		{"systemctl", "enable", "--now", "bcd.service"},
	}
	return cc
}

// TestCloudInitValuesKeepTheStructure renders the cloud-init template with each hostile
// value in each variable, bypassing the checks that would refuse most of them: the
// YAML must still read back as exactly the intended fields and argv.
func TestCloudInitValuesKeepTheStructure(t *testing.T) {
	for _, field := range VarNames {
		for name, value := range hostile {
			t.Run(field+"/"+name, func(t *testing.T) {
				v := withVar(testVars(testPins), field, value)
				doc, err := cloudInit(v)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(wantCloudConfig(v), parseCloudConfig(t, doc)); diff != "" {
					t.Errorf("parsed document (-want +got):\n%s\n%s", diff, doc)
				}
			})
		}
	}
}

// TestDownloadCommandRunsExactlyItsCommands runs the rendered download command with sh,
// over stand-ins for curl, sha256sum and chmod that record their arguments: whatever
// bcdUrl holds, curl gets it as one argument and nothing else runs.
func TestDownloadCommandRunsExactlyItsCommands(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this machine")
	}
	bin := t.TempDir()
	for _, cmd := range []string{"curl", "sha256sum", "chmod"} {
		script := "#!" + sh + "\nprintf '%s\\0' " + cmd + ` "$@" >> "$LOG"` + "\n"
		if cmd == "sha256sum" {
			script += `while IFS= read -r line; do printf '%s\n' "$line" >> "$LOG"; done` + "\n"
		}
		script += `printf '<end>\0' >> "$LOG"` + "\n"
		if err := os.WriteFile(filepath.Join(bin, cmd), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, value := range hostile {
		t.Run(name, func(t *testing.T) {
			v := withVar(testVars(testPins), "bcdUrl", value)
			doc, err := cloudInit(v)
			if err != nil {
				t.Fatal(err)
			}
			argv := parseCloudConfig(t, doc).Runcmd[0]
			log := filepath.Join(t.TempDir(), "log")
			cmd := exec.Command(sh, argv[1:]...)
			cmd.Env = []string{"PATH=" + bin, "LOG=" + log}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			got, _ := os.ReadFile(log)
			want := strings.Join([]string{
				"curl", "-fsSL", value, "-o", bcdargv.Path, "<end>",
				"sha256sum", "-c", "-", v.BcdSHA256 + "  " + bcdargv.Path + "\n<end>",
				"chmod", "0755", bcdargv.Path, "<end>", "",
			}, "\x00")
			if diff := cmp.Diff(want, string(got)); diff != "" {
				t.Errorf("commands run (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIgnitionValuesKeepTheStructure renders the Ignition template with each hostile
// value in each variable: a value that cannot sit on a unit's command line as it is is
// refused with INVALID_CONFIG naming it, and every other one reads back as exactly the
// intended config.
func TestIgnitionValuesKeepTheStructure(t *testing.T) {
	onCommandLine := map[string]bool{"controlPlaneUrl": true, "nodeId": true, "servingCaPin": true, "joinSigningPin": true, "joinEncryptionPin": true}
	for _, field := range VarNames {
		for name, value := range hostile {
			t.Run(field+"/"+name, func(t *testing.T) {
				v := withVar(testVars(testPins), field, value)
				doc, err := ignition(v)
				if onCommandLine[field] {
					if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != field {
						t.Fatalf("err = %v, want INVALID_CONFIG at %s", err, field)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				dec := json.NewDecoder(bytes.NewReader(doc))
				dec.DisallowUnknownFields()
				var got types.Config
				if err := dec.Decode(&got); err != nil {
					t.Fatalf("decode: %v\n%s", err, doc)
				}
				if diff := cmp.Diff(wantIgnition(v), summarize(t, got)); diff != "" {
					t.Errorf("parsed config (-want +got):\n%s\n%s", diff, doc)
				}
			})
		}
	}
}

// ignitionSummary is what an Ignition config of the template says, in plain values.
type ignitionSummary struct {
	Version string
	Files   []fileSummary
	Units   []unitSummary
}

type fileSummary struct {
	Path      string
	Mode      int
	Overwrite bool
	Source    string
	// Data is the decoded content of a data URL.
	Data string
	Hash string
}

type unitSummary struct {
	Name    string
	Enabled bool
	// ExecStart is the argv of the unit's ExecStart line, split on spaces.
	ExecStart []string
	Lines     int
}

func summarize(t *testing.T, c types.Config) ignitionSummary {
	t.Helper()
	s := ignitionSummary{Version: c.Ignition.Version}
	for _, f := range c.Storage.Files {
		fs := fileSummary{Path: f.Path, Mode: deref(f.Mode), Overwrite: deref(f.Overwrite), Source: deref(f.Contents.Source), Hash: deref(f.Contents.Verification.Hash)}
		if data, ok := strings.CutPrefix(fs.Source, "data:;base64,"); ok {
			raw, err := base64.StdEncoding.DecodeString(data)
			if err != nil {
				t.Fatalf("data URL of %s: %v", f.Path, err)
			}
			fs.Source, fs.Data = "data:;base64,", string(raw)
		}
		s.Files = append(s.Files, fs)
	}
	for _, u := range c.Systemd.Units {
		us := unitSummary{Name: u.Name, Enabled: deref(u.Enabled)}
		for line := range strings.Lines(deref(u.Contents)) {
			us.Lines++
			if cmd, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "ExecStart="); ok {
				us.ExecStart = strings.Split(cmd, " ")
			}
		}
		s.Units = append(s.Units, us)
	}
	return s
}

func wantIgnition(v Vars) ignitionSummary {
	joinLines := 10
	return ignitionSummary{
		Version: "3.4.0",
		Files: []fileSummary{
			{Path: bcdargv.TokenFile, Mode: 0o600, Overwrite: true, Source: "data:;base64,", Data: v.JoinToken},
			{Path: bcdargv.Path, Mode: 0o755, Overwrite: true, Source: v.BcdURL, Hash: "sha256-" + v.BcdSHA256},
		},
		Units: []unitSummary{
			{Name: "bcd-join.service", Enabled: true, ExecStart: bcdargv.Join(v.ControlPlaneURL, v.NodeID, v.Pins), Lines: joinLines},
			{Name: "bcd.service", Enabled: true, ExecStart: bcdargv.Node(), Lines: 11},
		},
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// withVar returns v with the variable name set to value.
func withVar(v Vars, name, value string) Vars {
	f := v.field(name)
	if f == nil {
		panic("no template variable " + name)
	}
	*f = value
	return v
}

// TestShippedTemplatesPassIgnitionAndYAML parses the rendered shipped templates, with
// and without pins, with the parsers of their readers: Ignition's own (no error, no
// warning) and YAML.
func TestShippedTemplatesPassIgnitionAndYAML(t *testing.T) {
	for name, pins := range map[string]joinwire.Pins{"with pins": testPins, "without pins": {}} {
		t.Run(name, func(t *testing.T) {
			v := testVars(pins)
			doc, err := ignition(v)
			if err != nil {
				t.Fatal(err)
			}
			cfg, report, err := v34.Parse(doc)
			if err != nil || len(report.Entries) != 0 {
				t.Fatalf("Ignition's parser: %v\n%s", err, report)
			}
			if diff := cmp.Diff(wantIgnition(v), summarize(t, cfg)); diff != "" {
				t.Errorf("Ignition config (-want +got):\n%s", diff)
			}
			doc, err = cloudInit(v)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantCloudConfig(v), parseCloudConfig(t, doc)); diff != "" {
				t.Errorf("cloud-init document (-want +got):\n%s", diff)
			}
		})
	}
}
