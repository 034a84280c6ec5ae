package inventory

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// CPU reads the `cpu` section from /proc/cpuinfo: the first model name and the number
// of logical CPUs.
func CPU(root string) (proto.CPUInfo, error) {
	var c proto.CPUInfo
	err := eachLine(filepath.Join(root, "proc/cpuinfo"), func(key, value string) {
		switch key {
		case "processor":
			c.Count++
		case "model name":
			if c.Model == "" {
				c.Model = value
			}
		}
	})
	return c, err
}

// Memory reads the `memory` section from /proc/meminfo.
func Memory(root string) (proto.MemoryInfo, error) {
	var m proto.MemoryInfo
	err := eachLine(filepath.Join(root, "proc/meminfo"), func(key, value string) {
		if key == "MemTotal" {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(value, " kB"), 10, 64)
			m.TotalBytes = kb * 1024
		}
	})
	return m, err
}

// eachLine calls fn with every "key: value" line of a proc file.
func eachLine(path string, fn func(key, value string)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if key, value, ok := strings.Cut(sc.Text(), ":"); ok {
			fn(strings.TrimSpace(key), strings.TrimSpace(value))
		}
	}
	return sc.Err()
}
