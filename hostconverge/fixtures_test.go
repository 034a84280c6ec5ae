package hostconverge

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/hostconverge/debpkg"
	"github.com/better-compute/better-compute/proto"
)

// gone removes a file from a fixture in with.
const gone = "\x00gone"

// with returns base with the files of over put in, and the gone ones left out.
func with(base map[string]string, over map[string]string) map[string]string {
	files := maps.Clone(base)
	for name, content := range over {
		if content == gone {
			delete(files, name)
		} else {
			files[name] = content
		}
	}
	return files
}

// kernelHost is an Intel host with four CPUs, two NUMA nodes, no module loaded and no
// file of bcd's.
func kernelHost() map[string]string {
	files := map[string]string{
		"/proc/cmdline":              "BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=0b1c2d3e ro quiet splash\n",
		"/etc/default/grub":          "GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet splash\"\n",
		"/proc/cpuinfo":              "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n",
		"/proc/modules":              "",
		"/proc/sys/kernel/osrelease": "6.8.0-45-generic\n",
		"/lib/modules/6.8.0-45-generic/modules.builtin":                          "kernel/drivers/char/ipmi/ipmi_devintf.ko\nkernel/fs/nls/nls_cp437.ko\n",
		"/proc/sys/vm/swappiness":                                                "60\n",
		"/proc/sys/net/ipv4/tcp_rmem":                                            "4096\t131072\t6291456\n",
		"/proc/sys/net/ipv4/ip_forward":                                          "0\n",
		"/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":                 "0\n",
		"/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages": "0\n",
		"/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages": "0\n",
		"/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages":              "0\n",
		"/sys/kernel/mm/transparent_hugepage/enabled":                            "[always] madvise never\n",
		"/sys/devices/system/cpu/present":                                        "0-3\n",
	}
	for cpu := range 4 {
		dir := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/cpufreq/", cpu)
		files[dir+"scaling_governor"] = "schedutil\n"
		files[dir+"scaling_available_governors"] = "performance powersave schedutil\n"
	}
	return files
}

// dpkg renders a dpkg status file of installed packages given as name=version.
func dpkg(pkgs ...string) string {
	var b strings.Builder
	slices.Sort(pkgs)
	for _, p := range pkgs {
		name, version, _ := strings.Cut(p, "=")
		fmt.Fprintf(&b, "Package: %s\nStatus: install ok installed\nPriority: optional\nArchitecture: amd64\nVersion: %s\nDescription: %s\n the package %s\n\n", name, version, name, name)
	}
	b.WriteString("Package: removed-long-ago\nStatus: deinstall ok config-files\nVersion: 1.0-1\n")
	return b.String()
}

// nvrm renders /proc/driver/nvidia/version.
func nvrm(version string, open bool) string {
	kind := "x86_64 Kernel Module"
	if open {
		kind = "Open Kernel Module for x86_64"
	}
	return "NVRM version: NVIDIA UNIX " + kind + "  " + version + "  Release Build  (dvs-builder@U16-I3-D08-1-1)  Tue Sep 23 09:38:57 UTC 2025\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"
}

// gpuHost is an Ubuntu host with packages installed as name=version.
func gpuHost(pkgs ...string) map[string]string {
	return map[string]string{
		"/etc/os-release":      "PRETTY_NAME=\"Ubuntu 24.04.3 LTS\"\nID=ubuntu\nID_LIKE=debian\n",
		"/var/lib/dpkg/status": dpkg(append(pkgs, "bash=5.2.21-2ubuntu4")...),
	}
}

// installs is apt-get's effect: packages given as name=version replace the installed
// packages whose names start with the prefixes in replaces.
func installs(replaces []string, pkgs ...string) func(h *fakeHost) {
	return func(h *fakeHost) {
		data, err := os.ReadFile(filepath.Join(h.root, debpkg.StatusFile))
		if err != nil {
			h.t.Fatal(err)
		}
		installed, err := debpkg.ParseStatus(data)
		if err != nil {
			h.t.Fatal(err)
		}
		var list []string
		for name, version := range installed {
			if !slices.ContainsFunc(replaces, func(p string) bool { return strings.HasPrefix(name, p) }) {
				list = append(list, name+"="+version)
			}
		}
		h.write(debpkg.StatusFile, dpkg(append(list, pkgs...)...))
	}
}

// answers scripts replies on h once the effect runs: the state a program changed.
func answers(replies map[string]reply) func(h *fakeHost) {
	return func(h *fakeHost) {
		for line, r := range replies {
			h.answer(line, r)
		}
	}
}

// active is systemctl's view of a unit enabled and running.
func active(unit string) map[string]reply {
	return map[string]reply{
		"systemctl is-enabled " + unit: {out: "enabled\n"},
		"systemctl is-active " + unit:  {out: "active\n"},
	}
}

// inactive is systemctl's view of a unit neither enabled nor running.
func inactive(unit string) map[string]reply {
	return map[string]reply{
		"systemctl is-enabled " + unit: {out: "disabled\n", err: "exit status 1"},
		"systemctl is-active " + unit:  {out: "inactive\n", err: "exit status 3"},
	}
}

// merge joins reply scripts.
func merge(scripts ...map[string]reply) map[string]reply {
	out := map[string]reply{}
	for _, s := range scripts {
		maps.Copy(out, s)
	}
	return out
}

// secrets is a secret store from a map.
type secrets map[string]string

func (s secrets) Secret(_ context.Context, ref string) ([]byte, error) {
	v, ok := s[ref]
	if !ok {
		return nil, proto.Errorf(proto.NotFound, "no secret %s", ref)
	}
	return []byte(v), nil
}
