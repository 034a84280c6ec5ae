package hostenv

import (
	"bytes"
	"context"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestExecRunnerBoundsOutput: a program (a package's maintainer script, under apt-get)
// that prints without end does not make bcd keep all of it: the head and the tail of
// its output are kept with how much was cut between them, and the last line of its
// standard error still names the failure.
func TestExecRunnerBoundsOutput(t *testing.T) {
	const script = "printf 'first line\\n'; head -c 67108864 /dev/zero; printf '\\nlast line\\n'; " +
		"head -c 67108864 /dev/zero >&2; echo >&2; echo the reason >&2; exit 1"
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, err := ExecRunner{}.Run(context.Background(), "sh", "-c", script)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.HasSuffix(err.Error(), ": the reason") {
		t.Errorf("error %v, want one ending with the last line of stderr", err)
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
