package hostconverge

import (
	"context"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/hostconverge/k8s"
	"github.com/better-compute/better-compute/hostconverge/kernel"
	"github.com/better-compute/better-compute/hostconverge/nvidia"
)

// dropIn is the GRUB drop-in a unit writes for params.
func dropIn(unit, params string) map[string]string {
	return map[string]string{kernel.DropIn(unit): "# Kernel parameters of the better-compute host-config unit " + unit + ".\n" +
		"# bcd rewrites this file; change the unit instead.\n" +
		`GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT:+$GRUB_CMDLINE_LINUX_DEFAULT }` + params + "\"\n"}
}

// booted is a kernel command line with params added.
func booted(params string) map[string]string {
	return map[string]string{kernel.ProcCmdline: "BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=0b1c2d3e ro quiet splash " + params + "\n"}
}

const header = "# Written by bcd for the better-compute host-config unit "

func join(files ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		out = with(out, f)
	}
	return out
}

var (
	settingsQuery = "nvidia-smi --query-gpu=index,power.limit,power.min_limit,power.max_limit,ecc.mode.current,ecc.mode.pending --format=csv,noheader,nounits"
	migQuery      = "nvidia-smi --query-gpu=index,mig.mode.current,mig.mode.pending --format=csv,noheader"
	lgiLayout     = `+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 1g.10gb         19        9          2:1     |
+-------------------------------------------------------+
|   0  MIG 1g.10gb         19       10          3:1     |
+-------------------------------------------------------+
|   0  MIG 2g.20gb         14        3          0:2     |
+-------------------------------------------------------+
|   0  MIG 3g.40gb          9        2          4:4     |
+-------------------------------------------------------+
`
	lgiSevens   = "+----+\n| GPU instances: |\n" + strings.Repeat("|   0  MIG 1g.10gb         19        9          0:1     |\n+----+\n", 7)
	kubeletConf = "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: LS0tLS1CRUdJTg==\n    server: https://10.0.0.1:6443\n  name: default-cluster\n"
	joinUnit    = `{"server": "https://10.0.0.1:6443", "caCertSha256": "` + strings.Repeat("ab", 32) + `", "tokenRef": "secret://k8s/bootstrap", "kubernetesVersion": "v1.34", "nodeLabels": {"example.com/pool": "h100"}, "taints": ["nvidia.com/gpu=present:NoSchedule"], "gpu": true, "gpuApi": "dra"}`
	kubeletArgs = header + "k8s-join.\n# bcd rewrites this file; change the unit instead.\nKUBELET_EXTRA_ARGS=\"--node-labels=better-compute.io/gpu-api=dra,example.com/pool=h100 --register-with-taints=nvidia.com/gpu=present:NoSchedule\"\n"
	joinToken   = "abcdef.0123456789abcdef"
	kubeadmJoin = "kubeadm join --config " + k8s.JoinConfig
	mpsService  = "/etc/systemd/system/better-compute-mps.service"
)

// unitCase is one unit converged on one host.
type unitCase struct {
	unit, settings string
	files          map[string]string
	replies        map[string]reply
	want           Status
	// again: a second pass on the host the first left must change nothing.
	again bool
}

func unitCases() map[string]unitCase {
	sysctlConf := map[string]string{kernel.SysctlConf: header + "sysctl.\n# bcd rewrites this file; change the unit instead.\nnet.ipv4.ip_forward = 1\nnet.ipv4.tcp_rmem = 4096 87380 6291456\nvm.swappiness = 10\n"}
	sysctlLive := map[string]string{"/proc/sys/vm/swappiness": "10\n", "/proc/sys/net/ipv4/tcp_rmem": "4096\t87380\t6291456\n", "/proc/sys/net/ipv4/ip_forward": "1\n"}
	modulesFiles := map[string]string{
		kernel.ModulesLoad:     header + "kernel-modules.\n# bcd rewrites this file; change the unit instead.\nnvidia\nnvidia-uvm\nipmi_devintf\n",
		kernel.ModprobeOptions: header + "kernel-modules.\n# bcd rewrites this file; change the unit instead.\noptions nvidia NVreg_EnableGpuFirmware=0\n",
	}
	loadsModule := func(name string) reply {
		return reply{effect: func(h *fakeHost) {
			data := h.snapshot()[kernel.ProcModules]
			_, content, _ := strings.Cut(data, "\n")
			h.write(kernel.ProcModules, content+strings.ReplaceAll(name, "-", "_")+" 1234 0 - Live 0x0\n")
		}}
	}
	hugepagesLive := map[string]string{
		"/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages": "512\n",
		"/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages": "512\n",
		"/sys/kernel/mm/transparent_hugepage/enabled":                            "always [madvise] never\n",
	}
	governors := func(gov string) map[string]string {
		files := map[string]string{}
		for _, cpu := range []string{"0", "1", "2", "3"} {
			files["/sys/devices/system/cpu/cpu"+cpu+"/cpufreq/scaling_governor"] = gov + "\n"
		}
		return files
	}
	driver580 := "nvidia-driver-580-open=580.95.05-0ubuntu1"
	fm580 := "nvidia-fabricmanager-580=580.95.05-0ubuntu1"
	aptUpdate := map[string]reply{"apt-get update -q": {}}
	smiSettings := func(rows ...string) map[string]reply {
		return map[string]reply{settingsQuery: {out: strings.Join(rows, "\n") + "\n"}}
	}
	sharingFiles := func(replicas, percent string) map[string]string {
		return map[string]string{
			nvidia.DevicePluginConfig: header + "gpu-sharing.\nversion: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: " + replicas + "\n",
			mpsService: header + "gpu-sharing.\n[Unit]\nDescription=CUDA Multi-Process Service control daemon (better-compute gpu-sharing)\nAfter=nvidia-persistenced.service\n\n[Service]\nType=forking\n" +
				"Environment=CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps\nEnvironment=CUDA_MPS_LOG_DIRECTORY=/var/log/nvidia-mps\nEnvironment=CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + percent + "\n" +
				"RuntimeDirectory=nvidia-mps\nLogsDirectory=nvidia-mps\nExecStart=/usr/bin/nvidia-cuda-mps-control -d\nExecStop=/bin/sh -c 'echo quit | /usr/bin/nvidia-cuda-mps-control'\nRestart=on-failure\n\n[Install]\nWantedBy=multi-user.target\n",
		}
	}
	k8sHost := gpuHost("kubelet=1.34.1-1.1", "kubeadm=1.34.1-1.1")
	return map[string]unitCase{
		"kernel-modules/fresh": {
			unit: "kernel-modules", settings: `{"load": ["nvidia", "nvidia-uvm", "ipmi_devintf"], "options": {"nvidia": "NVreg_EnableGpuFirmware=0"}}`,
			files:   kernelHost(),
			replies: map[string]reply{"modprobe nvidia": loadsModule("nvidia"), "modprobe nvidia-uvm": loadsModule("nvidia-uvm")},
			want:    Changed, again: true,
		},
		"kernel-modules/converged": {
			unit: "kernel-modules", settings: `{"load": ["nvidia", "nvidia-uvm", "ipmi_devintf"], "options": {"nvidia": "NVreg_EnableGpuFirmware=0"}}`,
			files: join(kernelHost(), modulesFiles, map[string]string{
				kernel.ProcModules: "nvidia_uvm 1234 0 - Live 0x0\nnvidia 54947840 1 nvidia_uvm, Live 0x0\n",
				"/sys/module/nvidia/parameters/NVreg_EnableGpuFirmware": "0\n",
			}),
			want: Converged,
		},
		"kernel-modules/drifted": {
			unit: "kernel-modules", settings: `{"load": ["nvidia", "nvidia-uvm", "ipmi_devintf"], "options": {"nvidia": "NVreg_EnableGpuFirmware=0"}}`,
			files: join(kernelHost(), modulesFiles, map[string]string{
				kernel.ModprobeOptions: "options nvidia NVreg_EnableGpuFirmware=1\n",
				kernel.ProcModules:     "nvidia 54947840 0 - Live 0x0\n",
				"/sys/module/nvidia/parameters/NVreg_EnableGpuFirmware": "1\n",
			}),
			replies: map[string]reply{"modprobe nvidia-uvm": loadsModule("nvidia-uvm")},
			want:    RebootRequired,
		},
		"sysctl/fresh": {
			unit: "sysctl", settings: `{"vm.swappiness": 10, "net.ipv4.tcp_rmem": "4096 87380 6291456", "net.ipv4.ip_forward": true}`,
			files: kernelHost(), want: Changed, again: true,
		},
		"sysctl/converged": {
			unit: "sysctl", settings: `{"vm.swappiness": 10, "net.ipv4.tcp_rmem": "4096 87380 6291456", "net.ipv4.ip_forward": true}`,
			files: join(kernelHost(), sysctlConf, sysctlLive), want: Converged,
		},
		"sysctl/drifted": {
			unit: "sysctl", settings: `{"vm.swappiness": 10, "net.ipv4.tcp_rmem": "4096 87380 6291456", "net.ipv4.ip_forward": true}`,
			files: join(kernelHost(), sysctlConf, sysctlLive, map[string]string{"/proc/sys/vm/swappiness": "60\n"}), want: Changed,
		},
		"hugepages/fresh": {
			unit: "hugepages", settings: `{"pages1g": 16, "transparent": "madvise", "perNuma": {"0": {"pages2m": 512}, "1": {"pages2m": 512}}}`,
			files: kernelHost(), replies: map[string]reply{"update-grub": {}}, want: RebootRequired, // no second pass: a plain file cannot show sysfs's bracketed choice
		},
		"hugepages/converged": {
			unit: "hugepages", settings: `{"pages1g": 16, "transparent": "madvise", "perNuma": {"0": {"pages2m": 512}, "1": {"pages2m": 512}}}`,
			files: join(kernelHost(), hugepagesLive, dropIn("hugepages", "hugepagesz=1G hugepages=16"), booted("hugepagesz=1G hugepages=16")),
			want:  Converged,
		},
		"hugepages/drifted": {
			unit: "hugepages", settings: `{"pages1g": 16, "transparent": "madvise", "perNuma": {"0": {"pages2m": 512}, "1": {"pages2m": 512}}}`,
			files: join(kernelHost(), hugepagesLive, dropIn("hugepages", "hugepagesz=1G hugepages=16"), booted("hugepagesz=1G hugepages=16"), map[string]string{
				"/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages": "0\n",
				"/sys/kernel/mm/transparent_hugepage/enabled":                            "[always] madvise never\n",
			}),
			want: Changed,
		},
		"cpu/fresh": {
			unit: "cpu", settings: `{"governor": "performance", "isolate": "2-3"}`,
			files: kernelHost(), replies: map[string]reply{"update-grub": {}}, want: RebootRequired, again: true,
		},
		"cpu/converged": {
			unit: "cpu", settings: `{"governor": "performance", "isolate": "2-3"}`,
			files: join(kernelHost(), governors("performance"), dropIn("cpu", "isolcpus=2-3 nohz_full=2-3 rcu_nocbs=2-3"), booted("isolcpus=2-3 nohz_full=2-3 rcu_nocbs=2-3")),
			want:  Converged,
		},
		"cpu/drifted": {
			unit: "cpu", settings: `{"governor": "performance", "isolate": "2-3"}`,
			files: join(kernelHost(), governors("performance"), dropIn("cpu", "isolcpus=2-3 nohz_full=2-3 rcu_nocbs=2-3"), booted("isolcpus=2-3 nohz_full=2-3 rcu_nocbs=2-3"),
				map[string]string{"/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor": "powersave\n"}),
			want: Changed,
		},
		"iommu/fresh": {
			unit: "iommu", settings: `{}`, files: kernelHost(), replies: map[string]reply{"update-grub": {}}, want: RebootRequired, again: true,
		},
		"iommu/converged": {
			unit: "iommu", settings: `{}`, files: join(kernelHost(), dropIn("iommu", "intel_iommu=on iommu=pt"), booted("intel_iommu=on iommu=pt")), want: Converged,
		},
		"iommu/drifted": {
			unit: "iommu", settings: `{}`,
			files:   join(kernelHost(), dropIn("iommu", "intel_iommu=off"), booted("intel_iommu=on iommu=pt")),
			replies: map[string]reply{"update-grub": {}}, want: Changed,
		},
		"nvidia-driver/fresh": {
			unit: "nvidia-driver", settings: `{"branch": "580", "open": true}`, files: gpuHost(),
			replies: merge(aptUpdate, map[string]reply{"apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold nvidia-driver-580-open": {effect: installs(nil, driver580)}}),
			want:    RebootRequired, again: true,
		},
		"nvidia-driver/converged": {
			unit: "nvidia-driver", settings: `{"branch": "580", "open": true}`,
			files: with(gpuHost(driver580), map[string]string{nvidia.ProcDriverVersion: nvrm("580.95.05", true)}), want: Converged,
		},
		"nvidia-driver/drifted": {
			unit: "nvidia-driver", settings: `{"branch": "580", "open": true}`,
			files:   with(gpuHost("nvidia-driver-570=570.172.08-0ubuntu1"), map[string]string{nvidia.ProcDriverVersion: nvrm("570.172.08", false)}),
			replies: merge(aptUpdate, map[string]reply{"apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold nvidia-driver-580-open": {effect: installs([]string{"nvidia-driver-"}, driver580)}}),
			want:    RebootRequired,
		},
		"fabric-manager/fresh": {
			unit: "fabric-manager", settings: `{}`,
			files: with(gpuHost(driver580), map[string]string{nvidia.ProcDriverVersion: nvrm("580.95.05", true)}),
			replies: merge(aptUpdate, inactive("nvidia-fabricmanager"), map[string]reply{
				"apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold nvidia-fabricmanager-580": {effect: installs(nil, fm580)},
				"systemctl enable --now nvidia-fabricmanager": {effect: answers(active("nvidia-fabricmanager"))},
			}),
			want: Changed, again: true,
		},
		"fabric-manager/converged": {
			unit: "fabric-manager", settings: `{}`,
			files:   with(gpuHost(driver580, fm580), map[string]string{nvidia.ProcDriverVersion: nvrm("580.95.05", true)}),
			replies: active("nvidia-fabricmanager"), want: Converged,
		},
		"fabric-manager/drifted": {
			unit: "fabric-manager", settings: `{}`,
			files: with(gpuHost(driver580, fm580), map[string]string{nvidia.ProcDriverVersion: nvrm("580.95.05", true)}),
			replies: merge(active("nvidia-fabricmanager"), map[string]reply{
				"systemctl is-active nvidia-fabricmanager":    {out: "failed\n", err: "exit status 3"},
				"systemctl enable --now nvidia-fabricmanager": {effect: answers(active("nvidia-fabricmanager"))},
			}),
			want: Changed,
		},
		"gpu-settings/fresh": {
			unit: "gpu-settings", settings: `{"powerLimitWatts": 700, "ecc": true}`,
			replies: merge(smiSettings("0, 600.00, 100.00, 700.00, Disabled, Disabled", "1, 600.00, 100.00, 700.00, Disabled, Disabled"), map[string]reply{
				"nvidia-smi -i 0 -pl 700": {}, "nvidia-smi -i 1 -pl 700": {}, "nvidia-smi -i 0 -e 1": {},
				"nvidia-smi -i 1 -e 1": {effect: answers(smiSettings("0, 700.00, 100.00, 700.00, Disabled, Enabled", "1, 700.00, 100.00, 700.00, Disabled, Enabled"))},
			}),
			want: RebootRequired, again: true,
		},
		"gpu-settings/converged": {
			unit: "gpu-settings", settings: `{"powerLimitWatts": 700, "ecc": true}`,
			replies: smiSettings("0, 700.00, 100.00, 700.00, Enabled, Enabled", "1, 700.00, 100.00, 700.00, Enabled, Enabled"),
			want:    Converged,
		},
		"gpu-settings/drifted": {
			unit: "gpu-settings", settings: `{"powerLimitWatts": 700, "ecc": true}`,
			replies: merge(smiSettings("0, 700.00, 100.00, 700.00, Enabled, Enabled", "1, 650.00, 100.00, 700.00, Enabled, Enabled"), map[string]reply{"nvidia-smi -i 1 -pl 700": {}}),
			want:    Changed,
		},
		"mig-layout/fresh": {
			unit: "mig-layout", settings: `{"layout": {"all": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], "1": []}}`,
			replies: map[string]reply{
				migQuery:                 {out: "0, Disabled, Disabled\n1, Disabled, Disabled\n"},
				"nvidia-smi -i 0 -mig 1": {effect: answers(map[string]reply{migQuery: {out: "0, Disabled, Enabled\n1, Disabled, Disabled\n"}})},
			},
			want: RebootRequired, again: true,
		},
		"mig-layout/converged": {
			unit: "mig-layout", settings: `{"layout": {"all": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], "1": []}}`,
			replies: map[string]reply{migQuery: {out: "0, Enabled, Enabled\n1, Disabled, Disabled\n"}, "nvidia-smi mig -lgi": {out: lgiLayout}},
			want:    Converged,
		},
		"mig-layout/drifted": {
			unit: "mig-layout", settings: `{"layout": {"all": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], "1": []}}`,
			replies: map[string]reply{
				migQuery: {out: "0, Enabled, Enabled\n1, Disabled, Disabled\n"}, "nvidia-smi mig -lgi": {out: lgiSevens},
				"nvidia-smi mig -i 0 -dci": {}, "nvidia-smi mig -i 0 -dgi": {},
				"nvidia-smi mig -i 0 -cgi 3g.40gb,2g.20gb,1g.10gb,1g.10gb -C": {effect: answers(map[string]reply{"nvidia-smi mig -lgi": {out: lgiLayout}})},
			},
			want: Changed, again: true,
		},
		"gpu-sharing/fresh": {
			unit: "gpu-sharing", settings: `{"mode": "mps", "replicas": 4}`,
			replies: merge(inactive("better-compute-mps.service"), map[string]reply{
				"systemctl daemon-reload":                           {},
				"systemctl enable --now better-compute-mps.service": {effect: answers(active("better-compute-mps.service"))},
			}),
			want: Changed, again: true,
		},
		"gpu-sharing/converged": {
			unit: "gpu-sharing", settings: `{"mode": "mps", "replicas": 4}`,
			files: sharingFiles("4", "25"), replies: active("better-compute-mps.service"), want: Converged,
		},
		"gpu-sharing/drifted": {
			unit: "gpu-sharing", settings: `{"mode": "mps", "replicas": 4}`,
			files: with(sharingFiles("4", "50"), map[string]string{nvidia.DevicePluginConfig: "version: v1\n"}),
			replies: merge(active("better-compute-mps.service"), map[string]reply{
				"systemctl daemon-reload": {}, "systemctl restart better-compute-mps.service": {},
			}),
			want: Changed,
		},
		"gpu-sharing/mps-to-timeslice": {
			unit: "gpu-sharing", settings: `{"mode": "timeslice", "replicas": 2}`,
			files:   sharingFiles("4", "25"),
			replies: map[string]reply{"systemctl disable --now better-compute-mps.service": {}, "systemctl daemon-reload": {}},
			want:    Changed, again: true,
		},
		"container-toolkit/fresh": {
			unit: "container-toolkit", settings: `{}`,
			files: with(gpuHost(driver580), map[string]string{nvidia.ProcDriverVersion: nvrm("580.95.05", true)}),
			replies: merge(aptUpdate, map[string]reply{
				"apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold nvidia-container-toolkit": {effect: installs(nil, "nvidia-container-toolkit=1.18.0-1")},
				"nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml": {effect: func(h *fakeHost) { h.write(nvidia.CDISpec, "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n") }},
			}),
			want: Changed, again: true,
		},
		"container-toolkit/converged": {
			unit: "container-toolkit", settings: `{}`,
			files: with(gpuHost(driver580, "nvidia-container-toolkit=1.18.0-1"), map[string]string{
				nvidia.ProcDriverVersion: nvrm("580.95.05", true), nvidia.CDISpec: "cdiVersion: 0.5.0\n", nvidia.CDIStamp: "580.95.05\n",
			}),
			want: Converged,
		},
		"container-toolkit/drifted": {
			unit: "container-toolkit", settings: `{}`,
			files: with(gpuHost(driver580, "nvidia-container-toolkit=1.18.0-1"), map[string]string{
				nvidia.ProcDriverVersion: nvrm("580.95.05", true), nvidia.CDISpec: "cdiVersion: 0.5.0\n", nvidia.CDIStamp: "570.172.08\n",
			}),
			replies: map[string]reply{"nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml": {effect: func(h *fakeHost) { h.write(nvidia.CDISpec, "cdiVersion: 0.5.0\n# 580\n") }}},
			want:    Changed,
		},
		"k8s-join/fresh": {
			unit: "k8s-join", settings: joinUnit, files: k8sHost,
			replies: map[string]reply{
				kubeadmJoin: {effect: func(h *fakeHost) { h.write(k8s.KubeletConf, kubeletConf) }},
			},
			want: Changed, again: true,
		},
		"k8s-join/converged": {
			unit: "k8s-join", settings: joinUnit,
			files: with(k8sHost, map[string]string{k8s.KubeletConf: kubeletConf, k8s.KubeletDefaults: kubeletArgs}), want: Converged,
		},
		"k8s-join/drifted": {
			unit: "k8s-join", settings: joinUnit,
			files:   with(k8sHost, map[string]string{k8s.KubeletConf: kubeletConf, k8s.KubeletDefaults: "KUBELET_EXTRA_ARGS=\"--node-labels=example.com/pool=a100\"\n"}),
			replies: map[string]reply{"systemctl restart kubelet": {}}, want: Changed,
		},
	}
}

// TestUnits converges each unit on a fresh host (every file and program call it makes),
// a converged one (nothing happens) and a drifted one (exactly the drift is set back),
// against golden files.
func TestUnits(t *testing.T) {
	for name, tc := range unitCases() {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost(t, tc.files, tc.replies)
			c := &Converger{Root: h.root, Runner: h, Secrets: secrets{"secret://k8s/bootstrap": joinToken + "\n"}}
			spec := Spec{Generation: 1, Units: []Unit{{Name: tc.unit, Settings: []byte(tc.settings)}}}
			before := h.snapshot()
			results := c.Converge(context.Background(), spec)
			calls := h.takeCalls()
			diff := fileDiff(before, h.snapshot())
			golden(t, strings.ReplaceAll(name, "/", "-"), describe(results, calls, diff))
			if len(results) != 1 || results[0].Status != tc.want {
				t.Fatalf("results %+v, want one of status %s", results, tc.want)
			}
			for _, r := range results {
				if strings.Contains(r.Message+strings.Join(r.Corrections, " "), joinToken) {
					t.Errorf("the join token is in the result: %+v", r)
				}
			}
			if strings.HasSuffix(name, "/converged") {
				assertQuiet(t, results, calls, diff)
			}
			if tc.again {
				before := h.snapshot()
				results := c.Converge(context.Background(), spec)
				assertQuiet(t, results, h.takeCalls(), fileDiff(before, h.snapshot()))
			}
		})
	}
}

// assertQuiet fails unless a pass changed nothing: no correction, no mutating call, no
// file written.
func assertQuiet(t *testing.T, results []UnitResult, calls []string, diff string) {
	t.Helper()
	for _, r := range results {
		if len(r.Corrections) > 0 || r.Status == Changed || r.Status == Failed {
			t.Errorf("a quiet pass reported %s: %s %q", r.Status, r.Message, r.Corrections)
		}
	}
	for _, c := range calls {
		if mutating(c) {
			t.Errorf("a quiet pass ran %s", c)
		}
	}
	if diff != "" {
		t.Errorf("a quiet pass changed files:\n%s", diff)
	}
}
