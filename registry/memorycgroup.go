package registry

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// CgroupMemory is the memory limit of the cgroup a process runs in, as the kernel
// enforces it: the smallest limit of its cgroup and the cgroup's ancestors, cgroup v1's
// memory controller and cgroup v2 both read (a hybrid machine has each).
type CgroupMemory struct {
	// Limit is in bytes; 0 when there is none.
	Limit int64
	// File is the memory.max or memory.limit_in_bytes that set Limit, as the process
	// names it (/sys/fs/cgroup/...).
	File string
	// Reason says why there is no limit, when Limit is 0.
	Reason string
}

// cgroupV1Unlimited: a cgroup v1 limit at or past it is none (the kernel writes an
// unlimited one as the largest multiple of the page size under 2^63).
const cgroupV1Unlimited = 1 << 62

// ReadCgroupMemory reads the memory limit of the cgroup of the process whose /proc
// directory is self ("proc/self"), in root, the filesystem the process sees
// (os.DirFS("/")): which cgroup it is in from self/cgroup, where each hierarchy is
// mounted from self/mountinfo, then each limit file from the process's cgroup up to the
// hierarchy's mount. A file that cannot be read counts as no limit there (the root
// cgroup has none); one that is not a limit gives no limit at all, with the reason.
func ReadCgroupMemory(root fs.FS, self string) CgroupMemory {
	procCgroup, err := fs.ReadFile(root, path.Join(self, "cgroup"))
	if err != nil {
		return CgroupMemory{Reason: fmt.Sprintf("no cgroup: %v", err)}
	}
	mountinfo, err := fs.ReadFile(root, path.Join(self, "mountinfo"))
	if err != nil {
		return CgroupMemory{Reason: fmt.Sprintf("no cgroup mounts: %v", err)}
	}
	mounts := parseCgroupMounts(mountinfo)
	var dirs []cgroupDir
	for _, l := range parseProcCgroup(procCgroup) {
		if l.v2 {
			if m, ok := mounts.v2(); ok {
				dirs = append(dirs, cgroupDir{m, l.path, "memory.max"})
			}
		} else if slices.Contains(l.controllers, "memory") {
			if m, ok := mounts.v1("memory"); ok {
				dirs = append(dirs, cgroupDir{m, l.path, "memory.limit_in_bytes"})
			}
		}
	}
	if len(dirs) == 0 {
		return CgroupMemory{Reason: "no memory cgroup mounted for this process"}
	}
	best := CgroupMemory{Reason: "no memory limit on " + dirs[0].dir()}
	for _, d := range dirs {
		for dir := range d.up() {
			file := path.Join(dir, d.file)
			text, err := fs.ReadFile(root, fsPath(file))
			if err != nil {
				continue
			}
			limit, err := parseCgroupLimit(string(text))
			if err != nil {
				return CgroupMemory{Reason: fmt.Sprintf("%s: %v", file, err)}
			}
			if limit > 0 && (best.Limit == 0 || limit < best.Limit) {
				best = CgroupMemory{Limit: limit, File: file}
			}
		}
	}
	return best
}

// parseCgroupLimit reads a memory limit file: memory.max ("max" or bytes) or
// memory.limit_in_bytes (bytes, none near 2^63); 0 for none.
func parseCgroupLimit(text string) (int64, error) {
	s := strings.TrimSpace(text)
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a memory limit (bytes, or max)", truncate(s, 40))
	}
	if n >= cgroupV1Unlimited {
		return 0, nil
	}
	return n, nil
}

// fsPath is an absolute path as an fs.FS rooted at / names it.
func fsPath(p string) string {
	if p == "/" {
		return "."
	}
	return strings.TrimPrefix(p, "/")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// cgroupLine is a line of /proc/PID/cgroup: hierarchy-ID:controllers:path.
type cgroupLine struct {
	v2          bool
	controllers []string
	path        string
}

func parseProcCgroup(text []byte) []cgroupLine {
	var lines []cgroupLine
	for line := range strings.SplitSeq(string(text), "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		controllers, p, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(p, "/") {
			continue
		}
		lines = append(lines, cgroupLine{v2: id == "0" && controllers == "", controllers: strings.Split(controllers, ","), path: p})
	}
	return lines
}

// cgroupMount is a cgroup hierarchy's mount: the cgroup at its root (Root, "/" unless
// the mount shows only part of the hierarchy, as in a container) and where it is.
type cgroupMount struct {
	root, point string
}

type cgroupMounts struct {
	v2mounts []cgroupMount
	// v1mounts by controller.
	v1mounts map[string]cgroupMount
}

func (m cgroupMounts) v2() (cgroupMount, bool) {
	if len(m.v2mounts) == 0 {
		return cgroupMount{}, false
	}
	return m.v2mounts[0], true
}

func (m cgroupMounts) v1(controller string) (cgroupMount, bool) {
	c, ok := m.v1mounts[controller]
	return c, ok
}

// parseCgroupMounts reads the cgroup mounts of /proc/PID/mountinfo: "ID PARENT
// MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPEROPTIONS", cgroup v1's
// controllers in its super options.
func parseCgroupMounts(text []byte) cgroupMounts {
	m := cgroupMounts{v1mounts: map[string]cgroupMount{}}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+3 > len(fields) {
			continue
		}
		mount := cgroupMount{root: unescapeMountinfo(fields[3]), point: unescapeMountinfo(fields[4])}
		if !strings.HasPrefix(mount.root, "/") || !strings.HasPrefix(mount.point, "/") {
			continue
		}
		switch fields[sep+1] {
		case "cgroup2":
			m.v2mounts = append(m.v2mounts, mount)
		case "cgroup":
			if sep+3 >= len(fields) {
				continue
			}
			for _, opt := range strings.Split(fields[sep+3], ",") {
				if _, ok := m.v1mounts[opt]; !ok {
					m.v1mounts[opt] = mount
				}
			}
		}
	}
	return m
}

// unescapeMountinfo undoes mountinfo's octal escapes of a space, tab, newline and
// backslash (\040).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupDir is a process's cgroup in one hierarchy and the limit file it reads there.
type cgroupDir struct {
	mount cgroupMount
	path  string
	file  string
}

// dir is where the process's cgroup is: its path below the mount's root cgroup, under
// the mount point; the mount point itself when the path is not below the mount's root
// (a cgroup namespace's view of a cgroup outside it, "/.." included).
func (d cgroupDir) dir() string {
	if slices.Contains(strings.Split(d.path, "/"), "..") {
		return d.mount.point
	}
	rel := path.Clean(d.path)
	if d.mount.root != "/" {
		r, ok := strings.CutPrefix(rel, path.Clean(d.mount.root))
		if !ok || (r != "" && !strings.HasPrefix(r, "/")) {
			return d.mount.point
		}
		rel = r
	}
	return path.Join(d.mount.point, rel)
}

// up yields the process's cgroup's directory and each of its ancestors' up to the
// mount point.
func (d cgroupDir) up() func(yield func(string) bool) {
	return func(yield func(string) bool) {
		dir := d.dir()
		for {
			if !yield(dir) || dir == d.mount.point || dir == "/" {
				return
			}
			dir = path.Dir(dir)
		}
	}
}
