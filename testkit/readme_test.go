package testkit

import (
	"bufio"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// notRun is how the README marks, on the line before it, a bash example that
// TestREADMEExamples does not run, followed by the reason.
const notRun = "<!-- not run by TestREADMEExamples:"

// example is one ```bash block of the README.
type example struct {
	line   int    // of its opening fence
	script string // its lines
	skip   string // the reason it is not run, from the marker before it
}

// readmeExamples returns the README's bash examples in order.
func readmeExamples(t *testing.T, path string) []example {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []example
	var cur *example
	prev := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && line == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.script += line + "\n"
		case line == "```bash":
			cur = &example{line: n}
			if reason, ok := strings.CutPrefix(prev, notRun); ok {
				cur.skip = strings.TrimSpace(strings.TrimSuffix(reason, "-->"))
			}
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	return out
}

// TestREADMEExamples runs the README's bash examples as written, in order, in one shell
// (variables and files carry from one to the next, as in an operator's session), against
// a real registry: the working directory has the built bin/better-compute and bin/bcd
// and the repository's examples/, BC_CONFIG is the registry's admin.conf, and the one
// path an operator chooses, the data directory /var/lib/better-compute, is the
// registry's. The files the text says the operator has are there: the image artifact
// ubuntu-24.04-server-2026.09.raw.zst (random bytes) and bmc-admin.json. An example that
// cannot run in a test (it starts the registry itself, needs root and a machine's
// network, or names a remote host) carries the notRun marker with its reason; any other
// failing is a README that does not work as written.
func TestREADMEExamples(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("needs openssl, as the README's signing example does")
	}
	examples := readmeExamples(t, filepath.Join(moduleRoot(), "README.md"))
	if len(examples) < 5 {
		t.Fatalf("found %d bash examples in README.md", len(examples))
	}
	reg := StartRegistry(t, "")
	work := t.TempDir()
	for _, link := range [][2]string{{Binary(t, "better-compute"), "bin/better-compute"}, {Binary(t, "bcd"), "bin/bcd"},
		{filepath.Join(moduleRoot(), "examples"), "examples"}} {
		os.MkdirAll(filepath.Join(work, "bin"), 0o755)
		if err := os.Symlink(link[0], filepath.Join(work, link[1])); err != nil {
			t.Fatal(err)
		}
	}
	artifact := make([]byte, 1<<20)
	rand.Read(artifact)
	os.WriteFile(filepath.Join(work, "ubuntu-24.04-server-2026.09.raw.zst"), artifact, 0o600)
	os.WriteFile(filepath.Join(work, "bmc-admin.json"), []byte(`{"username": "admin", "password": "hunter2"}`+"\n"), 0o600)

	// One shell: each example is sent whole, then a line that reports it ran.
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	ran := 0
	for _, ex := range examples {
		if ex.skip != "" {
			t.Logf("README.md:%d not run: %s", ex.line, ex.skip)
			continue
		}
		ran++
		body := strings.ReplaceAll(ex.script, "/var/lib/better-compute", reg.DataDir)
		script.WriteString("echo '>>> README.md:" + strconv.Itoa(ex.line) + "'\n" + body)
	}
	script.WriteString("echo '>>> all examples ran'\n")
	cmd := exec.Command("bash", "-c", script.String())
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "BC_CONFIG="+reg.AdminConfig)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), ">>> all examples ran") {
		last := strings.LastIndex(string(out), ">>> README.md:")
		t.Fatalf("the README's examples failed (%v) in the example marked below:\n%s", err, out[max(last, 0):])
	}
	t.Logf("ran %d of %d examples", ran, len(examples))
}
