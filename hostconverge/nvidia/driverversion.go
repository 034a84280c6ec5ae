package nvidia

import (
	"regexp"
	"strings"
)

// ProcDriverVersion is where the loaded NVIDIA kernel module shows its version.
const ProcDriverVersion = "/proc/driver/nvidia/version"

var driverVersion = regexp.MustCompile(`^[0-9]{3}\.[0-9]{1,3}(\.[0-9]{1,3})?$`)

// ParseDriverVersion reads /proc/driver/nvidia/version: the version of the loaded kernel
// module and whether it is the open one, from its NVRM line, like
//
//	NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  ...
func ParseDriverVersion(s string) (version string, open bool, ok bool) {
	for line := range strings.SplitSeq(s, "\n") {
		rest, found := strings.CutPrefix(line, "NVRM version:")
		if !found {
			continue
		}
		for field := range strings.FieldsSeq(rest) {
			if driverVersion.MatchString(field) {
				return field, strings.Contains(rest, "Open Kernel Module"), true
			}
		}
		return "", false, false
	}
	return "", false, false
}
