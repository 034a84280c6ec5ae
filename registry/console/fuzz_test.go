package console

import (
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// FuzzCredentialOf: whatever a sign-in form's credential field holds, the console takes
// a non-empty secret or refuses it with INVALID_INPUT at credential; a field that is not
// a pasted file is the secret itself, trimmed.
func FuzzCredentialOf(f *testing.F) {
	for _, seed := range []string{"bc_abc", "  bc_abc\n", "", "{}", `{"version":1,"server":"https://127.0.0.1:7443","servingCA":"","credential":"bc_x"}`,
		`{"credential":"bc_x","credential":"bc_y"}`, `{"Credential":"bc_x"}`, `{"credential":1}`, "{", `{"credential":"bc_x"} trailing`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, field string) {
		secret, err := credentialOf(field)
		if err != nil {
			if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "credential" {
				t.Fatalf("%q: %v", field, err)
			}
			return
		}
		if secret == "" {
			t.Fatalf("%q: an empty secret", field)
		}
		if trimmed := strings.TrimSpace(field); !strings.HasPrefix(trimmed, "{") && secret != trimmed {
			t.Fatalf("%q: secret %q", field, secret)
		}
	})
}

// TestAPastedFilesRefusalNamesItsField: a pasted credential file with a field of the
// wrong kind is refused at the form's field, credential, with the file's own field in
// the message, as the CLI names it in a config file. Before, the message said "must be
// a whole number ..., not a string" of no field, and the field at fault was lost.
func TestAPastedFilesRefusalNamesItsField(t *testing.T) {
	for field, pasted := range map[string]string{
		"version":    `{"version":"1","server":"https://127.0.0.1:7443","credential":"bc_x"}`,
		"credential": `{"version":1,"credential":["bc_x"]}`,
	} {
		_, err := credentialOf(pasted)
		e := proto.AsError(err)
		if e.Code != proto.InvalidInput || e.Details.Path != "credential" || !strings.Contains(e.Message, "file, at "+field+":") {
			t.Errorf("%s: %v, want INVALID_INPUT at credential naming the file's %s", pasted, err, field)
		}
	}
}
