package tftp

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolve(t *testing.T) {
	cases := map[string]struct {
		name, want string
		refused    bool
	}{
		"plain":                {name: "undionly.kpxe", want: "undionly.kpxe"},
		"leading slash":        {name: "/ipxe.efi", want: "ipxe.efi"},
		"subdirectory":         {name: "arm64/ipxe.efi", want: "arm64/ipxe.efi"},
		"parent":               {name: "../etc/passwd", refused: true},
		"parent inside":        {name: "a/../../etc/passwd", refused: true},
		"dot":                  {name: "./ipxe.efi", refused: true},
		"double slash":         {name: "a//b", refused: true},
		"backslash traversal":  {name: `..\..\etc\passwd`, refused: true},
		"NUL":                  {name: "ipxe.efi\x00.txt", refused: true},
		"empty":                {name: "", refused: true},
		"only slashes":         {name: "///", refused: true},
		"trailing slash":       {name: "dir/", refused: true},
		"too long":             {name: strings.Repeat("a", 300), refused: true},
		"invalid UTF-8 passes": {name: "\xff", refused: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Resolve(c.name)
			if c.refused {
				if !errors.Is(err, ErrRefused) {
					t.Fatalf("Resolve(%q) = %q, %v; want ErrRefused", c.name, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// testRoot makes a root with a file, a directory, a link inside and links that escape,
// and a secret beside the root.
func testRoot(t testing.TB) (*os.Root, string) {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "root")
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(base, "secret"), []byte("secret"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "undionly.kpxe"), []byte("ipxe"), 0o644))
	must(t, os.Symlink("undionly.kpxe", filepath.Join(dir, "inside")))
	must(t, os.Symlink("../secret", filepath.Join(dir, "escape")))
	must(t, os.Symlink(filepath.Join(base, "secret"), filepath.Join(dir, "absolute")))
	must(t, os.Symlink("..", filepath.Join(dir, "sub", "up")))
	root, err := os.OpenRoot(dir)
	must(t, err)
	t.Cleanup(func() { root.Close() })
	return root, dir
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestOpen(t *testing.T) {
	root, _ := testRoot(t)
	cases := map[string]struct {
		name    string
		want    string
		missing bool
	}{
		"file":                   {name: "undionly.kpxe", want: "ipxe"},
		"link inside the root":   {name: "inside", want: "ipxe"},
		"relative link escapes":  {name: "escape"},
		"absolute link escapes":  {name: "absolute"},
		"directory link escapes": {name: "sub/up/secret"},
		"directory":              {name: "sub"},
		"missing":                {name: "nothing", missing: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f, err := Open(root, c.name)
			switch {
			case c.want != "":
				must(t, err)
				defer f.Close()
				b := make([]byte, 16)
				n, _ := f.Read(b)
				if diff := cmp.Diff(c.want, string(b[:n])); diff != "" {
					t.Error(diff)
				}
			case c.missing:
				if !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("got %v, want not-exist", err)
				}
			default:
				// Refused, or (for a link to "..") resolved inside the root, where
				// the name does not exist: either way nothing outside is read.
				if err == nil {
					f.Close()
					t.Fatal("served a file outside the root")
				}
			}
		})
	}
}

// FuzzOpen checks that no name reads anything but the one file inside the root.
func FuzzOpen(f *testing.F) {
	for _, s := range []string{"undionly.kpxe", "../secret", "escape", "sub/up/secret", "/absolute", "a/../../secret", `..\secret`, "sub/../undionly.kpxe"} {
		f.Add(s)
	}
	root, _ := testRoot(f)
	f.Fuzz(func(t *testing.T, name string) {
		rel, err := Resolve(name)
		if err == nil && (filepath.IsAbs(rel) || strings.Contains("/"+rel+"/", "/../")) {
			t.Fatalf("Resolve(%q) = %q leaves the root", name, rel)
		}
		file, err := Open(root, name)
		if err != nil {
			return
		}
		defer file.Close()
		b := make([]byte, 16)
		n, _ := file.Read(b)
		if string(b[:n]) != "ipxe" {
			t.Fatalf("Open(%q) read %q", name, b[:n])
		}
	})
}
