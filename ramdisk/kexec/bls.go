// Package kexec boots the OS the ramdisk just wrote without a trip through the
// firmware: it finds that OS's kernel, initrd and command line in its mounted file
// systems (Boot Loader Specification entries, the /boot symlinks Debian and Ubuntu keep,
// /etc/kernel/cmdline or GRUB's configuration), loads them with kexec_file_load, and
// reboots into them.
package kexec

import (
	"bufio"
	"fmt"
	"strings"
)

// Entry is one Boot Loader Specification entry (a loader/entries/*.conf file).
type Entry struct {
	Title   string
	Version string
	// Linux and Initrd are paths relative to the partition the entry lives on.
	Linux  string
	Initrd []string
	// Options is the kernel command line, every options line joined by a space.
	Options string
}

// maxEntryBytes bounds an entry file: real ones are a few hundred bytes.
const maxEntryBytes = 64 << 10

// ParseEntry reads an entry: "key value" lines, # comments, and keys it does not use
// ignored as the specification asks.
func ParseEntry(text string) (Entry, error) {
	if len(text) > maxEntryBytes {
		return Entry{}, fmt.Errorf("boot entry of %d bytes", len(text))
	}
	var e Entry
	var options []string
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), maxEntryBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value := line, ""
		if i := strings.IndexAny(line, " \t"); i >= 0 {
			key, value = line[:i], strings.TrimSpace(line[i:])
		}
		switch key {
		case "title":
			e.Title = value
		case "version":
			e.Version = value
		case "linux":
			e.Linux = value
		case "initrd":
			e.Initrd = append(e.Initrd, strings.Fields(value)...)
		case "options":
			options = append(options, value)
		}
	}
	if err := sc.Err(); err != nil {
		return Entry{}, err
	}
	if e.Linux == "" {
		return Entry{}, fmt.Errorf("boot entry %q names no linux kernel", e.Title)
	}
	e.Options = strings.Join(options, " ")
	return e, nil
}

// compareVersions orders two version strings the way packaging tools do: runs of
// digits compare as numbers, other runs as text, and a longer version wins a tie.
func compareVersions(a, b string) int {
	for a != "" && b != "" {
		ra, resta := run(a)
		rb, restb := run(b)
		if c := compareRuns(ra, rb); c != 0 {
			return c
		}
		a, b = resta, restb
	}
	return len(a) - len(b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// run splits off the leading run of digits or of other characters.
func run(s string) (string, string) {
	i := 1
	for i < len(s) && isDigit(s[i]) == isDigit(s[0]) {
		i++
	}
	return s[:i], s[i:]
}

func compareRuns(a, b string) int {
	da, db := isDigit(a[0]), isDigit(b[0])
	switch {
	case da && db:
		a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	case da:
		return 1
	case db:
		return -1
	}
	return strings.Compare(a, b)
}
