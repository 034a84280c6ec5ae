package userdata

import (
	"bytes"
	"strings"
	"testing"

	v34 "github.com/coreos/ignition/v2/config/v3_4"
	"github.com/google/go-cmp/cmp"
)

// FuzzParseTemplate feeds template texts to the custom template parser: nothing may
// panic, and a text that parses renders every "{{" as a value, never as itself.
func FuzzParseTemplate(f *testing.F) {
	for _, seed := range []string{"", "plain", "{{nodeId}}", "a {{ hostname }} b", "{{{nodeId}}}", "{{nodeId", "}}{{", "{{servingCaPin}}", "x\n{{joinToken}}\n{{bcdUrl}}"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		tmpl, err := ParseTemplate(text)
		if err != nil {
			return
		}
		doc, err := tmpl.Render(testVars(testPins))
		if err != nil {
			t.Fatalf("a parsed template does not render with every variable set: %v", err)
		}
		if bytes.Contains(doc, []byte("{{")) {
			t.Fatalf("rendered %q from %q: a {{ survived", doc, text)
		}
	})
}

// FuzzConfig feeds configuration files to ParseConfig and Check: nothing may panic,
// and a configuration they accept renders both shipped templates into documents whose
// structure is exactly the intended one.
func FuzzConfig(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"controlPlaneUrl": "https://r.example:7443", "bcdUrl": "https://c.example/bcd?a=1&b=%2F", "bcdSha256": "` + strings.Repeat("0a", 32) + `"}`,
		`{"controlPlaneUrl": "https://[fd00::1]:7443", "bcdUrl": "http://c/b#x", "bcdSha256": "` + strings.Repeat("f", 64) + `", "pins": {"servingCaPin": "` + testPins.ServingCA + `", "joinSigningPin": "` + testPins.JoinSigning + `", "joinEncryptionPin": "` + testPins.JoinEncryption + `"}}`,
		`{"controlPlaneUrl": "https://r/'$(reboot)'", "bcdUrl": "https://c/\u2028", "bcdSha256": "x"}`,
		`{"templates": {"t": "{{nodeId}}"}, "tokenTtlSeconds": 60}`,
		`{"pins": {}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil || cfg.Check() != nil || cfg.ControlPlaneURL == "" || cfg.BcdURL == "" || cfg.BcdSHA256 == "" {
			return
		}
		v := testVars(testPins)
		v.ControlPlaneURL, v.BcdURL, v.BcdSHA256 = cfg.ControlPlaneURL, cfg.BcdURL, cfg.BcdSHA256
		if cfg.Pins != nil {
			v.Pins = *cfg.Pins
		}
		if err := v.check(); err != nil {
			t.Fatalf("Check accepted a configuration whose values are refused: %v", err)
		}
		doc, err := cloudInit(v)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantCloudConfig(v), parseCloudConfig(t, doc)); diff != "" {
			t.Fatalf("cloud-init document (-want +got):\n%s", diff)
		}
		if doc, err = ignition(v); err != nil {
			t.Fatalf("Check accepted a configuration the Ignition template refuses: %v", err)
		}
		parsed, report, err := v34.Parse(doc)
		if err != nil || report.IsFatal() {
			t.Fatalf("Ignition's parser: %v\n%s\n%s", err, report, doc)
		}
		if diff := cmp.Diff(wantIgnition(v), summarize(t, parsed)); diff != "" {
			t.Fatalf("Ignition config (-want +got):\n%s", diff)
		}
	})
}
