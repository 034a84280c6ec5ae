package hostunit

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseCPUList(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []int
		err  string
	}{
		"single":         {"5", []int{5}, ""},
		"range":          {"2-4", []int{2, 3, 4}, ""},
		"list":           {"2-3,6,8-9", []int{2, 3, 6, 8, 9}, ""},
		"highest":        {"8191", []int{8191}, ""},
		"empty":          {"", nil, "empty"},
		"cpu 0":          {"0", nil, "CPU 0 cannot be isolated"},
		"range from 0":   {"0-3", nil, "CPU 0 cannot be isolated"},
		"beyond highest": {"8192", nil, "beyond the highest"},
		"descending":     {"4-2", nil, "does not ascend"},
		"single range":   {"4-4", nil, "does not ascend"},
		"unordered":      {"6,2", nil, "ascending order"},
		"overlap":        {"2-6,5-8", nil, "without overlaps"},
		"repeat":         {"2,2", nil, "without overlaps"},
		"leading zero":   {"02", nil, "not a CPU number"},
		"space":          {"2, 3", nil, "not a CPU number"},
		"stride":         {"2-10:2/4", nil, "not a CPU number"},
		"trailing comma": {"2,", nil, "not a CPU number"},
		"open range":     {"2-", nil, "not a CPU number"},
		"negative":       {"-2", nil, "not a CPU number"},
		"double range":   {"1-2-3", nil, "not a CPU number"},
		"plus":           {"+2", nil, "not a CPU number"},
		"too long":       {strings.Repeat("1", 1025), nil, "longer than 1024"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseCPUList(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
