package hostconverge

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// reply is a scripted program answer. effect runs before the answer, to change the fake
// host the way the real program would.
type reply struct {
	out    string
	err    string
	block  bool // wait for the unit's context to end, like a hung program
	effect func(h *fakeHost)
}

// fakeHost is a host as a directory tree and a runner answering scripted outputs and
// recording every call.
type fakeHost struct {
	t       testing.TB
	root    string
	mu      sync.Mutex
	replies map[string]reply
	calls   []string
}

func newFakeHost(t testing.TB, files map[string]string, replies map[string]reply) *fakeHost {
	h := &fakeHost{t: t, root: t.TempDir(), replies: map[string]reply{}}
	for name, content := range files {
		h.write(name, content)
	}
	for line, r := range replies {
		h.replies[line] = r
	}
	return h
}

// write puts a file of the fake host in place.
func (h *fakeHost) write(name, content string) {
	h.t.Helper()
	path := filepath.Join(h.root, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// answer scripts line's reply from now on.
func (h *fakeHost) answer(line string, r reply) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.replies[line] = r
}

func (h *fakeHost) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	h.mu.Lock()
	h.calls = append(h.calls, line)
	r, ok := h.replies[line]
	h.mu.Unlock()
	switch {
	case !ok:
		return nil, fmt.Errorf("exit status 127: %s is not scripted", line)
	case r.block:
		<-ctx.Done()
		return nil, errors.New("signal: killed")
	}
	if r.effect != nil {
		r.effect(h)
	}
	if r.err != "" {
		return []byte(r.out), errors.New(r.err)
	}
	return []byte(r.out), nil
}

// takeCalls returns the calls recorded since the last take.
func (h *fakeHost) takeCalls() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	calls := h.calls
	h.calls = nil
	return calls
}

// snapshot reads every file of the tree, by host path, with its mode.
func (h *fakeHost) snapshot() map[string]string {
	h.t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(h.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(h.root, path)
		files["/"+rel] = fmt.Sprintf("%v\n%s", info.Mode().Perm(), data)
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return files
}

// fileDiff describes how after differs from before: + new, ~ changed, - removed, with
// the new content.
func fileDiff(before, after map[string]string) string {
	var names []string
	for name := range after {
		if before[name] != after[name] {
			names = append(names, name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		content, ok := after[name]
		_, existed := before[name]
		switch {
		case !ok:
			fmt.Fprintf(&b, "- %s\n", name)
			continue
		case existed:
			fmt.Fprintf(&b, "~ %s", name)
		default:
			fmt.Fprintf(&b, "+ %s", name)
		}
		mode, data, _ := strings.Cut(content, "\n")
		fmt.Fprintf(&b, " (%s)\n", mode)
		for line := range strings.SplitSeq(strings.TrimSuffix(data, "\n"), "\n") {
			fmt.Fprintf(&b, "    | %s\n", line)
		}
	}
	return b.String()
}

// mutating reports a program call that changes the host; a converged pass makes none.
func mutating(call string) bool {
	for _, prefix := range []string{"apt-get install", "dpkg --force-confdef --force-confold --configure", "modprobe", "update-grub", "nvidia-smi -i", "nvidia-smi mig -i",
		"systemctl enable", "systemctl restart", "systemctl disable", "systemctl daemon-reload", "nvidia-ctk", "kubeadm"} {
		if strings.HasPrefix(call, prefix) {
			return true
		}
	}
	return false
}

// golden compares got with testdata/golden/name.golden, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// describe writes a pass for a golden file: the results, the calls and the file changes.
func describe(results []UnitResult, calls []string, diff string) string {
	var b strings.Builder
	for _, r := range results {
		fmt.Fprintf(&b, "unit %s: %s", r.Unit, r.Status)
		if r.Code != "" {
			fmt.Fprintf(&b, " %s terminal=%v", r.Code, r.Terminal)
		}
		fmt.Fprintf(&b, "\n  message: %s\n", r.Message)
		for _, c := range r.Corrections {
			fmt.Fprintf(&b, "  correction: %s\n", c)
		}
	}
	b.WriteString("calls:\n")
	for _, c := range calls {
		fmt.Fprintf(&b, "  %s\n", c)
	}
	b.WriteString("files:\n" + diff)
	return b.String()
}
