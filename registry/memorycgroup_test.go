package registry

import (
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// Mount tables as a hybrid machine (cgroup v1 controllers and v2 beside them), a
// machine on cgroup v2 alone, and a container seeing only its part of v1's hierarchy
// write them.
const (
	hybridMounts = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	v2Mounts = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	containerMounts = `700 690 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory
`
)

// TestReadCgroupMemory: the limit is the smallest of the process's cgroup and its
// ancestors' up to the mount, in v1's memory controller and in v2; unlimited or
// unreadable is none; a file that is not a limit is none with its reason, never a guess.
func TestReadCgroupMemory(t *testing.T) {
	for name, tc := range map[string]struct {
		files  map[string]string
		want   CgroupMemory
		reason string // in want.Reason, when there is no limit
	}{
		"v1": {map[string]string{
			"proc/self/cgroup":                               "4:memory:/reg\n1:cpu:/\n0::/\n",
			"proc/self/mountinfo":                            hybridMounts,
			"sys/fs/cgroup/memory/memory.limit_in_bytes":     "9223372036854771712\n",
			"sys/fs/cgroup/memory/reg/memory.limit_in_bytes": "536870912\n",
		}, CgroupMemory{Limit: 512 << 20, File: "/sys/fs/cgroup/memory/reg/memory.limit_in_bytes"}, ""},
		"v1 with a smaller ancestor": {map[string]string{
			"proc/self/cgroup":                                 "4:memory:/a/reg\n",
			"proc/self/mountinfo":                              hybridMounts,
			"sys/fs/cgroup/memory/a/memory.limit_in_bytes":     "268435456\n",
			"sys/fs/cgroup/memory/a/reg/memory.limit_in_bytes": "536870912\n",
		}, CgroupMemory{Limit: 256 << 20, File: "/sys/fs/cgroup/memory/a/memory.limit_in_bytes"}, ""},
		"v1 unlimited": {map[string]string{
			"proc/self/cgroup":                               "4:memory:/reg\n",
			"proc/self/mountinfo":                            hybridMounts,
			"sys/fs/cgroup/memory/memory.limit_in_bytes":     "9223372036854771712\n",
			"sys/fs/cgroup/memory/reg/memory.limit_in_bytes": "9223372036854771712\n",
		}, CgroupMemory{}, "no memory limit on /sys/fs/cgroup/memory/reg"},
		"v1 in a container": {map[string]string{
			"proc/self/cgroup":                           "4:memory:/docker/abc\n",
			"proc/self/mountinfo":                        containerMounts,
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824",
		}, CgroupMemory{Limit: 1 << 30, File: "/sys/fs/cgroup/memory/memory.limit_in_bytes"}, ""},
		"v2": {map[string]string{
			"proc/self/cgroup":                                  "0::/system.slice/reg.service\n",
			"proc/self/mountinfo":                               v2Mounts,
			"sys/fs/cgroup/system.slice/memory.max":             "max\n",
			"sys/fs/cgroup/system.slice/reg.service/memory.max": "1073741824\n",
		}, CgroupMemory{Limit: 1 << 30, File: "/sys/fs/cgroup/system.slice/reg.service/memory.max"}, ""},
		"nested v2 with a smaller ancestor": {map[string]string{
			"proc/self/cgroup":               "0::/a/b/c\n",
			"proc/self/mountinfo":            v2Mounts,
			"sys/fs/cgroup/a/memory.max":     "2147483648\n",
			"sys/fs/cgroup/a/b/memory.max":   "805306368\n",
			"sys/fs/cgroup/a/b/c/memory.max": "max\n",
		}, CgroupMemory{Limit: 768 << 20, File: "/sys/fs/cgroup/a/b/memory.max"}, ""},
		"v2 max": {map[string]string{
			"proc/self/cgroup":           "0::/a\n",
			"proc/self/mountinfo":        v2Mounts,
			"sys/fs/cgroup/a/memory.max": "max\n",
		}, CgroupMemory{}, "no memory limit on /sys/fs/cgroup/a"},
		"v2 under a cgroup namespace's root": {map[string]string{
			"proc/self/cgroup":           "0::/../../a\n",
			"proc/self/mountinfo":        v2Mounts,
			"sys/fs/cgroup/memory.max":   "1073741824\n",
			"sys/fs/cgroup/a/memory.max": "1\n",
		}, CgroupMemory{Limit: 1 << 30, File: "/sys/fs/cgroup/memory.max"}, ""},
		"hybrid, the smaller of v1 and v2": {map[string]string{
			"proc/self/cgroup":                               "4:memory:/reg\n0::/reg\n",
			"proc/self/mountinfo":                            hybridMounts,
			"sys/fs/cgroup/memory/reg/memory.limit_in_bytes": "536870912\n",
			"sys/fs/cgroup/unified/reg/memory.max":           "268435456\n",
		}, CgroupMemory{Limit: 256 << 20, File: "/sys/fs/cgroup/unified/reg/memory.max"}, ""},
		"a mount point with a space": {map[string]string{
			"proc/self/cgroup":    "0::/a\n",
			"proc/self/mountinfo": `30 22 0:26 / /cg\040two rw - cgroup2 cgroup2 rw` + "\n",
			"cg two/a/memory.max": "1073741824\n",
		}, CgroupMemory{Limit: 1 << 30, File: "/cg two/a/memory.max"}, ""},
		"limit files unreadable": {map[string]string{
			"proc/self/cgroup":    "4:memory:/reg\n",
			"proc/self/mountinfo": hybridMounts,
		}, CgroupMemory{}, "no memory limit on /sys/fs/cgroup/memory/reg"},
		"no /proc": {map[string]string{}, CgroupMemory{}, "no cgroup:"},
		"no mountinfo": {map[string]string{
			"proc/self/cgroup": "0::/\n",
		}, CgroupMemory{}, "no cgroup mounts:"},
		"no memory cgroup": {map[string]string{
			"proc/self/cgroup":    "1:cpu:/\n",
			"proc/self/mountinfo": hybridMounts,
		}, CgroupMemory{}, "no memory cgroup mounted"},
		"the memory controller not mounted": {map[string]string{
			"proc/self/cgroup":    "4:memory:/reg\n",
			"proc/self/mountinfo": v2Mounts,
		}, CgroupMemory{}, "no memory cgroup mounted"},
		"garbage": {map[string]string{
			"proc/self/cgroup":                               "4:memory:/reg\n",
			"proc/self/mountinfo":                            hybridMounts,
			"sys/fs/cgroup/memory/reg/memory.limit_in_bytes": "lots\n",
		}, CgroupMemory{}, `/sys/fs/cgroup/memory/reg/memory.limit_in_bytes: "lots" is not a memory limit`},
		"garbage in an ancestor": {map[string]string{
			"proc/self/cgroup":             "0::/a/b\n",
			"proc/self/mountinfo":          v2Mounts,
			"sys/fs/cgroup/a/memory.max":   "-5\n",
			"sys/fs/cgroup/a/b/memory.max": "1073741824\n",
		}, CgroupMemory{}, `/sys/fs/cgroup/a/memory.max: "-5" is not a memory limit`},
		"garbage lines": {map[string]string{
			"proc/self/cgroup":    "\x00\nmemory\n4:memory\n4:memory:reg\n",
			"proc/self/mountinfo": "- cgroup\n1 2 3 - cgroup2\n" + strings.Repeat("x ", 1000),
		}, CgroupMemory{}, "no memory cgroup mounted"},
	} {
		t.Run(name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for p, text := range tc.files {
				fsys[p] = &fstest.MapFile{Data: []byte(text)}
			}
			got := ReadCgroupMemory(fsys, "proc/self")
			if got.Limit != tc.want.Limit || got.File != tc.want.File {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if tc.reason != "" && !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("reason %q, want it to say %q", got.Reason, tc.reason)
			}
			if got.Limit > 0 && got.Reason != "" || got.Limit == 0 && got.Reason == "" {
				t.Errorf("limit %d with reason %q: want exactly one", got.Limit, got.Reason)
			}
		})
	}
}

// FuzzReadCgroupMemory: whatever /proc/self/cgroup, mountinfo and a limit file say, the
// result is a positive limit read from a file under a mount, or none with a reason;
// never a panic.
func FuzzReadCgroupMemory(f *testing.F) {
	f.Add("4:memory:/reg\n0::/\n", hybridMounts, "536870912\n")
	f.Add("0::/a/b\n", v2Mounts, "max\n")
	f.Add("4:memory:/docker/abc\n", containerMounts, "9223372036854771712")
	f.Add("0::/../x\n", `1 2 3 /a\040b /c\134d - cgroup2 x rw`, "-1")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, procCgroup, mountinfo, limit string) {
		fsys := fstest.MapFS{
			"proc/self/cgroup":    {Data: []byte(procCgroup)},
			"proc/self/mountinfo": {Data: []byte(mountinfo)},
		}
		// The limit file in every directory the process's cgroup could name, a few levels.
		mounts := parseCgroupMounts([]byte(mountinfo))
		for _, l := range parseProcCgroup([]byte(procCgroup)) {
			for _, file := range []string{"memory.max", "memory.limit_in_bytes"} {
				for _, m := range append(slices.Collect(maps.Values(mounts.v1mounts)), mounts.v2mounts...) {
					for dir := range (cgroupDir{m, l.path, file}).up() {
						fsys[fsPath(path.Join(dir, file))] = &fstest.MapFile{Data: []byte(limit)}
					}
				}
			}
		}
		got := ReadCgroupMemory(fsys, "proc/self")
		switch {
		case got.Limit < 0:
			t.Fatalf("negative limit %+v", got)
		case got.Limit > 0 && (got.File == "" || got.Reason != ""):
			t.Fatalf("limit without its file, or with a reason: %+v", got)
		case got.Limit == 0 && got.Reason == "":
			t.Fatalf("no limit and no reason: %+v", got)
		}
	})
}
