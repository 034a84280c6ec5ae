package session

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestReadBootID reads the boot id as Linux writes it (with its newline) under a root,
// and none where there is no procfs or what it holds is no boot id.
func TestReadBootID(t *testing.T) {
	cases := map[string]struct {
		file string // the file's content; "-" for no file
		want string
	}{
		"as Linux writes it": {file: "3f1c2a9e-6d4b-4e8a-9b7c-0d1e2f3a4b5c\n", want: "3f1c2a9e-6d4b-4e8a-9b7c-0d1e2f3a4b5c"},
		"no procfs":          {file: "-"},
		"not a boot id":      {file: "reboot-me\n"},
		"upper case":         {file: "3F1C2A9E-6D4B-4E8A-9B7C-0D1E2F3A4B5C\n"},
		"empty":              {file: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if tc.file != "-" {
				path := filepath.Join(root, bootIDFile)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.file), 0o444); err != nil {
					t.Fatal(err)
				}
			}
			if got := ReadBootID(root, slog.New(slog.DiscardHandler)); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
