package cmdline

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUsageLinesBreakBetweenGroups: a usage line breaks only between its words, keeping a
// flag with its value and a bracketed group whole, and no line passes Width.
func TestUsageLinesBreakBetweenGroups(t *testing.T) {
	line := "better-compute nodes enroll --pool P (--mac M[,M] | --product-uuid U) --bmc-driver D --bmc-address A " +
		"[--bmc-credential secret://...] [--hardware-profile H] [--label k=v ...] [--driver concern=driver ...] [--tenant T] [flags]"
	got := useTokens(line)
	want := []string{"better-compute", "nodes", "enroll", "--pool P", "(--mac M[,M] | --product-uuid U)", "--bmc-driver D",
		"--bmc-address A", "[--bmc-credential secret://...]", "[--hardware-profile H]", "[--label k=v ...]",
		"[--driver concern=driver ...]", "[--tenant T]", "[flags]"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	wrapped := wrapTokens(got, "  ", "      ")
	for _, l := range strings.Split(strings.TrimSuffix(wrapped, "\n"), "\n") {
		if len(l) > Width {
			t.Errorf("a line of %d columns: %q", len(l), l)
		}
	}
	if strings.ReplaceAll(strings.Join(strings.Fields(wrapped), " "), "\n", "") != line {
		t.Errorf("wrapping changed the words:\n%s", wrapped)
	}
}
