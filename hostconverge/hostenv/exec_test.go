package hostenv

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExecRunnerBoundsOutput: a program (a package's maintainer script, under apt-get)
// that prints without end does not make bcd keep all of it: the head and the tail of
// its output are kept with how much was cut between them, and the error still ends with
// the last line of its standard error, after a mark of the lines left out.
func TestExecRunnerBoundsOutput(t *testing.T) {
	const script = "printf 'first line\\n'; head -c 67108864 /dev/zero; printf '\\nlast line\\n'; " +
		"head -c 67108864 /dev/zero >&2; echo >&2; echo the reason >&2; exit 1"
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, err := ExecRunner{}.Run(context.Background(), "sh", "-c", script)
	runtime.ReadMemStats(&after)
	if err == nil || err.Error() != "exit status 1: …; the reason" {
		t.Errorf("error %v, want the last line of stderr after a mark of the lines left out", err)
	}
	if len(out) > maxOutput+64 {
		t.Errorf("kept %d bytes of a 64 MiB output, want at most %d and a note", len(out), maxOutput)
	}
	if !bytes.HasPrefix(out, []byte("first line\n")) || !bytes.HasSuffix(out, []byte("\x00\nlast line\n")) {
		t.Errorf("the output kept does not start with its first line and end with its last")
	}
	cut := 67108864 + len("first line\n\nlast line\n") - maxOutput
	if note := []byte("… (" + strconv.Itoa(cut) + " bytes cut) …"); !bytes.Contains(out, note) {
		t.Errorf("the output kept does not say %q", note)
	}
	// Kept whole, stdout and stderr each grew to 128 MiB of allocations; bounded, the
	// rest is read through small buffers, which the race detector's sync.Pool, dropping
	// pooled buffers at random, may allocate anew for each read.
	if n := after.TotalAlloc - before.TotalAlloc; n > 160<<20 {
		t.Errorf("running a program that printed 64 MiB on each output allocated %d MiB", n>>20)
	}
}

// TestClippedKeepsHeadAndTail writes an output in pieces of every size around the
// bound's halves and checks what is kept against the output whole.
func TestClippedKeepsHeadAndTail(t *testing.T) {
	for _, size := range []int{0, 1, maxOutput - 1, maxOutput, maxOutput + 1, 3*maxOutput + 7} {
		for _, piece := range []int{1 << 10, 4093, maxOutput/2 + 1, 2 * maxOutput} {
			whole := make([]byte, size)
			for i := range whole {
				whole[i] = byte(i % 251)
			}
			want := whole
			if size > maxOutput {
				want = slices.Concat(whole[:maxOutput/2], []byte("\n… ("+strconv.Itoa(size-maxOutput)+" bytes cut) …\n"), whole[size-maxOutput/2:])
			}
			var c clipped
			for rest := whole; len(rest) > 0; {
				k := min(piece, len(rest))
				if n, err := c.Write(rest[:k]); n != k || err != nil {
					t.Fatalf("Write: %d, %v", n, err)
				}
				rest = rest[k:]
			}
			if !bytes.Equal(c.Bytes(), want) {
				t.Errorf("%d bytes written %d at a time: kept %d bytes, not the head and tail of them", size, piece, len(c.Bytes()))
			}
		}
	}
}

// kubeadmPreflight is what kubeadm join prints on its standard error when its preflight
// checks fail, and kubeadmDiscovery when it cannot reach the API server: the error, the
// lines that explain it, and last the hint that says how to see a stack trace.
const (
	kubeadmPreflight = "error execution phase preflight: [preflight] Some fatal errors occurred:\n" +
		"\t[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists\n" +
		"\t[ERROR Port-10250]: Port 10250 is in use\n" +
		"[preflight] If you know what you are doing, you can make a check non-fatal with `--ignore-preflight-errors=...`\n" +
		"To see the stack trace of this error execute with --v=5 or higher\n"
	kubeadmDiscovery = "error execution phase preflight: couldn't validate the identity of the API Server: failed to request the cluster-info ConfigMap: " +
		"Get \"https://10.0.0.1:6443/api/v1/namespaces/kube-public/configmaps/cluster-info?timeout=10s\": dial tcp 10.0.0.1:6443: connect: connection refused\n" +
		"To see the stack trace of this error execute with --v=5 or higher\n"
)

// TestExecRunnerReportsAFailuresError: a program that fails, here a script printing what
// kubeadm join prints, is an error carrying the end of its standard error without the
// stack trace hint kubeadm closes every failure with, bounded however much the program
// printed, and with no word of a line kept in part. Before, the error carried the last line
// alone, which for every kubeadm failure was that hint.
func TestExecRunnerReportsAFailuresError(t *testing.T) {
	const warning = "W1207 22:06:06.123456    4321 checks.go:1080] [preflight] WARNING: a warning"
	const word = "dial-tcp-10.0.0.1:6443-refused;"
	for name, tc := range map[string]struct {
		script, want string
	}{
		"preflight checks": {
			script: "echo '[preflight] Running pre-flight checks'\ncat >&2 <<'EOF'\n" + kubeadmPreflight + "EOF\nexit 1\n",
			want: "exit status 1: error execution phase preflight: [preflight] Some fatal errors occurred:; " +
				"[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists; [ERROR Port-10250]: Port 10250 is in use; " +
				"[preflight] If you know what you are doing, you can make a check non-fatal with `--ignore-preflight-errors=...`",
		},
		"discovery": {
			script: "cat >&2 <<'EOF'\n" + kubeadmDiscovery + "EOF\nexit 1\n",
			want:   "exit status 1: " + strings.TrimSuffix(strings.TrimSuffix(kubeadmDiscovery, "\n"), "\nTo see the stack trace of this error execute with --v=5 or higher"),
		},
		"warnings without end before the error": {
			script: "yes '" + warning + "' | head -n 100000 >&2\ncat >&2 <<'EOF'\n" + kubeadmDiscovery + "EOF\nexit 1\n",
			want: "exit status 1: …; " + strings.Repeat(warning+"; ", (maxErrorText-len(kubeadmDiscovery)+len(stackTraceHint)+3)/(len(warning)+2)) +
				strings.TrimSuffix(strings.TrimSuffix(kubeadmDiscovery, "\n"), "\n"+stackTraceHint),
		},
		"a long last line": {
			script: "printf '%s' '" + strings.Repeat(word+" ", 100) + "' >&2\nexit 1\n",
			want:   "exit status 1: " + strings.TrimSpace(strings.Repeat(word+" ", (maxErrorText+1)/(len(word)+1))) + " …",
		},
		"a line without end": {
			script: "head -c 1048576 /dev/zero | tr '\\0' x >&2\nexit 2\n",
			want:   "exit status 2: …",
		},
	} {
		t.Run(name, func(t *testing.T) {
			tool := filepath.Join(t.TempDir(), "kubeadm")
			if err := os.WriteFile(tool, []byte("#!/bin/sh\n"+tc.script), 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := ExecRunner{}.Run(context.Background(), tool, "join", "--config", "/run/better-compute/private/kubeadm-join.yaml")
			if err == nil {
				t.Fatal("the failed program is no error")
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if len(err.Error()) > len("exit status 1: …")+maxErrorText {
				t.Errorf("the error is %d bytes, over the bound of %d", len(err.Error()), maxErrorText)
			}
		})
	}
}
