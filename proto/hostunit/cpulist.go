package hostunit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// MaxCPU is the highest CPU number a cpulist may name.
const MaxCPU = 8191

// ParseCPUList parses a cpulist as an operator writes it for isolate and returns its
// CPUs in order: ParseCPURanges' form, not empty and at most 1024 bytes. CPU 0 is
// refused: it keeps the kernel's housekeeping work, and isolating it leaves the host
// unmanageable.
func ParseCPUList(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New("the cpulist is empty; leave isolate out instead")
	}
	if len(s) > 1024 {
		return nil, errors.New("the cpulist is longer than 1024 bytes")
	}
	cpus, err := parseCPUs(s)
	if err != nil {
		return nil, err
	}
	if cpus[0] == 0 {
		return nil, errors.New("CPU 0 cannot be isolated: it keeps the kernel's housekeeping work")
	}
	return cpus, nil
}

// ParseCPURanges parses a CPU list as the kernel writes it in sysfs (present, online:
// "0-63,128-191", with its newline) and returns its CPUs in order; "" is none. A list
// that does not ascend, or names a CPU beyond MaxCPU, is an error: no host writes one,
// and a hostile file cannot make it loop or fill memory.
func ParseCPURanges(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	return parseCPUs(s)
}

// parseCPUs parses comma-separated CPU numbers and ranges first-last ("2-15,18"),
// ascending and not overlapping, without spaces, strides or leading zeros.
func parseCPUs(s string) ([]int, error) {
	var cpus []int
	last := -1
	for elem := range strings.SplitSeq(s, ",") {
		firstText, lastText, isRange := strings.Cut(elem, "-")
		first, err := cpuNumber(firstText, elem)
		if err != nil {
			return nil, err
		}
		end := first
		if isRange {
			if end, err = cpuNumber(lastText, elem); err != nil {
				return nil, err
			}
			if end <= first {
				return nil, fmt.Errorf("the range %s does not ascend", proto.Quote(elem))
			}
		}
		if first <= last {
			return nil, fmt.Errorf("%s does not come after the CPUs before it; write the list in ascending order without overlaps", proto.Quote(elem))
		}
		for cpu := first; cpu <= end; cpu++ {
			cpus = append(cpus, cpu)
		}
		last = end
	}
	return cpus, nil
}

// cpuNumber parses one CPU number of elem.
func cpuNumber(s, elem string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("%s is not a CPU number or a range first-last", proto.Quote(elem))
	}
	if n > MaxCPU {
		return 0, fmt.Errorf("CPU %d is beyond the highest CPU number, %d", n, MaxCPU)
	}
	return n, nil
}
