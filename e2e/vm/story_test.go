package vm

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// storyEnv, when set (by `make demo`), names a file the VM tests tell their story in: one
// line per thing done, appended whole as it happens, which scripts/demo.sh shows as it
// comes. A line "phase: TITLE: WHAT" starts a numbered phase of the demo.
const storyEnv = "BC_E2E_STORY"

// story appends one line to the story file, when there is one.
func story(format string, args ...any) {
	path := os.Getenv(storyEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	f.WriteString(fmt.Sprintf(format, args...) + "\n")
}

// storyWriter tells the lines a `--wait` command prints: each step's change as it is,
// and the image stream's progress (deploy.deploy's "X of Y read") as a bar.
type storyWriter struct{ pending []byte }

func (w *storyWriter) Write(p []byte) (int, error) {
	w.pending = append(w.pending, p...)
	for {
		line, rest, ok := bytes.Cut(w.pending, []byte("\n"))
		if !ok {
			return len(p), nil
		}
		w.pending = rest
		story("   %s", progressBar(string(line)))
	}
}

// readProgress matches the progress the CLI prints of an image being streamed.
var readProgress = regexp.MustCompile(`(\d+(?:\.\d+)?) ([KMGT]?i?B) of (\d+(?:\.\d+)?) ([KMGT]?i?B) read, (.*) written`)

// progressBar turns a step line with the image stream's progress into a bar with its
// percentage; other lines stay as they are.
func progressBar(line string) string {
	m := readProgress.FindStringSubmatch(line)
	if m == nil {
		return line
	}
	read, size := bytesOf(m[1], m[2]), bytesOf(m[3], m[4])
	if size <= 0 {
		return line
	}
	const width = 30
	done := min(int(read/size*width), width)
	return fmt.Sprintf("image stream [%s%s] %3.0f%%  %s %s of %s %s read, %s written",
		strings.Repeat("#", done), strings.Repeat(".", width-done), 100*read/size, m[1], m[2], m[3], m[4], m[5])
}

// bytesOf reads back a size the CLI printed ("12.5 MiB").
func bytesOf(value, unit string) float64 {
	v, _ := strconv.ParseFloat(value, 64)
	if i := strings.IndexByte("KMGT", unit[0]); i >= 0 && unit != "B" {
		for range i + 1 {
			v *= 1024
		}
	}
	return v
}
