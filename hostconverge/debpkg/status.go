package debpkg

import (
	"bufio"
	"bytes"
	"strings"
)

// StatusFile is where dpkg records the installed packages.
const StatusFile = "/var/lib/dpkg/status"

// ParseStatus reads a dpkg status file and returns the version of each installed package
// (status "install ok installed", or held: "hold ok installed"), by name. Stanzas that
// are not installed, and lines it does not understand, are passed over.
func ParseStatus(data []byte) map[string]string {
	installed := map[string]string{}
	var name, version, status string
	flush := func() {
		if name != "" && version != "" && strings.HasSuffix(status, " ok installed") {
			installed[name] = version
		}
		name, version, status = "", "", ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		if !ok || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		value = strings.TrimSpace(value)
		switch key {
		case "Package":
			name = value
		case "Version":
			version = value
		case "Status":
			status = value
		}
	}
	flush()
	return installed
}

// Upstream returns the upstream part of a Debian version: without the epoch ("1:") and
// the Debian revision ("-0ubuntu1"), so "1:580.95.05-0ubuntu1" is "580.95.05".
func Upstream(version string) string {
	if _, after, ok := strings.Cut(version, ":"); ok {
		version = after
	}
	if i := strings.LastIndexByte(version, '-'); i >= 0 {
		version = version[:i]
	}
	return version
}
