package inventory

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// CPU reads the `cpu` section from /proc/cpuinfo.
func CPU(root string) (proto.CPUInfo, error) {
	return readProc(root, "cpuinfo", ParseCPUInfo)
}

// readProc parses /proc/NAME under root; a root without it (a chroot without procfs)
// reads as the zero value.
func readProc[T any](root, name string, parse func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(filepath.Join(root, "proc", name))
	if errors.Is(err, fs.ErrNotExist) {
		var zero T
		return zero, nil
	}
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close()
	return parse(f)
}

// ParseCPUInfo reads /proc/cpuinfo: the first model name, the logical CPUs
// ("processor" entries), the sockets (distinct "physical id"s) and the cores ("cpu
// cores" of each socket).
func ParseCPUInfo(r io.Reader) (proto.CPUInfo, error) {
	var c proto.CPUInfo
	physical := map[int]string{} // physical id by logical CPU
	cores := map[string]int{}    // cpu cores by physical id
	err := eachLine(r, func(key, value string) {
		cpu := c.Count - 1
		switch key {
		case "processor":
			c.Count++
		case "model name":
			if c.Model == "" {
				c.Model = value
			}
		case "physical id":
			if cpu >= 0 {
				physical[cpu] = value
			}
		case "cpu cores":
			if n, err := strconv.Atoi(value); err == nil && n > 0 && n <= 1<<20 && cpu >= 0 && physical[cpu] != "" {
				cores[physical[cpu]] = n
			}
		}
	})
	sockets := map[string]bool{}
	for _, p := range physical {
		sockets[p] = true
	}
	c.Sockets = len(sockets)
	for p := range sockets {
		c.Cores += cores[p]
	}
	return c, err
}

// Memory reads the `memory` section from /proc/meminfo.
func Memory(root string) (proto.MemoryInfo, error) {
	return readProc(root, "meminfo", ParseMemInfo)
}

// ParseMemInfo reads /proc/meminfo's MemTotal.
func ParseMemInfo(r io.Reader) (proto.MemoryInfo, error) {
	var m proto.MemoryInfo
	err := eachLine(r, func(key, value string) {
		if key == "MemTotal" {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(value, "kB")), 10, 64)
			if err == nil && kb > 0 && kb < 1<<53 {
				m.TotalBytes = kb * 1024
			}
		}
	})
	return m, err
}

// eachLine calls fn with every "key: value" line of a proc file.
func eachLine(r io.Reader, fn func(key, value string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20) // the flags line of a modern CPU is long
	for sc.Scan() {
		if key, value, ok := strings.Cut(sc.Text(), ":"); ok {
			fn(strings.TrimSpace(key), strings.TrimSpace(value))
		}
	}
	return sc.Err()
}
