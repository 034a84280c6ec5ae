package nvidia

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// gpuInstanceRow is one row of nvidia-smi mig -lgi's table:
//
//	|   0  MIG 3g.40gb          9        2          4:4     |
var gpuInstanceRow = regexp.MustCompile(`^\|\s+([0-9]{1,2})\s+MIG\s+([0-9]{1,2}g\.[0-9]{1,4}gb(?:\+me)?)\s+[0-9]+\s+[0-9]+\s+[0-9]+:[0-9]+\s+\|$`)

// ParseGPUInstances reads the table of nvidia-smi mig -lgi and returns each GPU's
// instance profiles, sorted. Lines that are not instance rows (borders, headers) are
// passed over.
func ParseGPUInstances(out string) map[int][]string {
	gpus := map[int][]string{}
	for line := range strings.SplitSeq(out, "\n") {
		m := gpuInstanceRow.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		gpu, _ := strconv.Atoi(m[1])
		gpus[gpu] = append(gpus[gpu], m[2])
	}
	for _, profiles := range gpus {
		slices.Sort(profiles)
	}
	return gpus
}
