package registry

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
)

// writeReplicaID writes data as dir's replica-id and reads it as the registry's start
// does.
func writeReplicaID(t *testing.T, dir string, data []byte) (string, error) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, ReplicaFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return replicaName(dir)
}

// TestReplicaIDOfNoStoreKeyIsRefused: a replica-id an operator wrote that cannot be the
// store key the replica's lease is kept under (40,000 bytes: a bbolt key is at most 32
// KiB), or that would split a log line (a line break inside), fails the start
// INVALID_CONFIG at --data-dir, naming the file. Before, it was taken: the first fails
// the start later with the store's "key too large", the second names the replica.
func TestReplicaIDOfNoStoreKeyIsRefused(t *testing.T) {
	for name, data := range map[string]string{
		"40,000 bytes":            strings.Repeat("r", 40000),
		"a line break inside":     "rg_a\nrg_b\n",
		"a space inside":          "rg a",
		"a byte past ASCII":       "rg_\u00e9",
		"nothing but white space": " \n\t",
	} {
		dir := t.TempDir()
		got, err := writeReplicaID(t, dir, []byte(data))
		if err == nil {
			t.Errorf("%s: taken as %s", name, proto.Quote(got))
			continue
		}
		if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != "--data-dir" || !strings.Contains(e.Message, filepath.Join(dir, ReplicaFile)) {
			t.Errorf("%s: %v; want INVALID_CONFIG at --data-dir naming the file", name, err)
		}
	}
}

// FuzzReplicaName reads any replica-id file as the registry's start does: refused
// INVALID_CONFIG at --data-dir naming the file, or a name of 1 to 128 printable ASCII
// characters and no space, the file's content without the white space around it, which
// reads back the same once written as the registry writes a new one.
func FuzzReplicaName(f *testing.F) {
	for _, s := range []string{"rg_0123456789abcdef\n", "rg_0123456789abcdef", "  eu-1 \r\n", "", "\n", "a b", "rg_a\nrg_b", "\x00", strings.Repeat("r", 129)} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	path := filepath.Join(dir, ReplicaFile)
	f.Fuzz(func(t *testing.T, data []byte) {
		name, err := writeReplicaID(t, dir, data)
		if err != nil {
			if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != "--data-dir" || !strings.Contains(e.Message, path) {
				t.Fatalf("refused %v: not INVALID_CONFIG at --data-dir naming %s", err, path)
			}
			return
		}
		if name != strings.TrimSpace(string(data)) || name == "" || len(name) > maxReplicaName {
			t.Fatalf("%q read as %q", data, name)
		}
		for _, c := range []byte(name) {
			if c <= ' ' || c > '~' {
				t.Fatalf("%q read as %q, which holds %q", data, name, c)
			}
		}
		if err := fsutil.WriteFileAtomic(path, []byte(name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if again, err := replicaName(dir); err != nil || again != name {
			t.Fatalf("%q written as the registry writes it reads back as %q (%v)", name, again, err)
		}
	})
}
