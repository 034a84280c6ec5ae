package hostunit

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cpuCase is a list, the CPUs it names or the error it is.
type cpuCase struct {
	in   string
	want []int
	err  string
}

// checkCPUs checks parse against each case.
func checkCPUs(t *testing.T, parse func(string) ([]int, error), tests map[string]cpuCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parse(tc.in)
			switch {
			case tc.err == "" && err == nil:
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			case tc.err == "" || err == nil || !strings.Contains(err.Error(), tc.err):
				t.Errorf("got %v, error %v; want %v, or an error containing %q", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestParseCPUList(t *testing.T) {
	tests := map[string]cpuCase{
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
	checkCPUs(t, ParseCPUList, tests)
}

// TestParseCPURanges: the kernel's own lists (sysfs present, online), bounded however
// hostile the file: a number or a list beyond MaxCPU is an error, never a loop.
func TestParseCPURanges(t *testing.T) {
	all := make([]int, MaxCPU+1)
	for i := range all {
		all[i] = i
	}
	checkCPUs(t, ParseCPURanges, map[string]cpuCase{
		"list":          {"0-3,8,10-11\n", []int{0, 1, 2, 3, 8, 10, 11}, ""},
		"single":        {"0", []int{0}, ""},
		"none":          {"\n", nil, ""},
		"highest":       {"8190-8191", []int{8190, 8191}, ""},
		"backward":      {"3-1", nil, `the range "3-1" does not ascend`},
		"word":          {"a-b", nil, `"a-b" is not a CPU number`},
		"negative":      {"-1", nil, `"-1" is not a CPU number`},
		"beyond":        {"8192", nil, "8192 is beyond the highest CPU number, 8191"},
		"largest int":   {"9223372036854775807", nil, "9223372036854775807 is beyond the highest CPU number"},
		"to largest":    {"0-9223372036854775807", nil, "9223372036854775807 is beyond the highest CPU number"},
		"all":           {"0-8191", all, ""},
		"all twice":     {"0-8191,0-8191", nil, "ascending order without overlaps"},
		"one too many":  {"0-8191,5", nil, "ascending order without overlaps"},
		"many repeated": {strings.Repeat("0-4095,", 3) + "0", nil, "ascending order without overlaps"},
	})
}
