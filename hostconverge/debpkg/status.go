package debpkg

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// Journal is where dpkg keeps what a run it did not finish was doing; apt-get refuses
// to install while it holds entries.
const Journal = "/var/lib/dpkg/updates"

// StatusFile is where dpkg records the installed packages.
const StatusFile = "/var/lib/dpkg/status"

// maxStatusLine bounds the lines of the status file ParseStatus reads: each is shorter.
const maxStatusLine = 1 << 20

// ParseStatus reads a dpkg status file and returns the version of each installed package
// (status "install ok installed", or held: "hold ok installed"), by name. Stanzas that
// are not installed, and lines it does not understand, are passed over. A line of
// maxStatusLine bytes or more is an error, not the end of the list.
func ParseStatus(data []byte) (map[string]string, error) {
	installed := map[string]string{}
	var name, version, status string
	flush := func() {
		if name != "" && version != "" && strings.HasSuffix(status, " ok installed") {
			installed[name] = version
		}
		name, version, status = "", "", ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxStatusLine)
	n := 0
	for sc.Scan() {
		n++
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
	if sc.Err() != nil {
		return nil, fmt.Errorf("line %d is %d bytes or longer", n+1, maxStatusLine)
	}
	flush()
	return installed, nil
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
