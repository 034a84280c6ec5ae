package hostunit

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/better-compute/better-compute/labelexpr"
)

func TestDecode(t *testing.T) {
	when := func(s string) labelexpr.Expr {
		e, err := labelexpr.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	n := func(v int64) *int64 { return &v }
	yes := true
	tests := map[string]struct {
		unit, doc string
		want      Settings
	}{
		"kernel-modules": {"kernel-modules", validSettings["kernel-modules"], &KernelModules{
			Common:  Common{When: when("gpu.vendor=nvidia")},
			Load:    []string{"nvidia", "nvidia_uvm", "ib-umad"},
			Options: map[string]string{"nvidia": "NVreg_EnableGpuFirmware=1 NVreg_OpenRmEnableUnsupportedGpus=0", "nvidia-drm": "modeset=1"},
		}},
		"sysctl scalars become text": {"sysctl", `{"vm.swappiness": 10, "net.ipv4.ip_forward": true, "net.ipv6.conf.all.forwarding": false, "net.ipv4.tcp_rmem": "4096 87380 6291456", "when": "lab"}`, &Sysctl{
			Common: Common{When: when("lab")},
			Values: map[string]string{"vm.swappiness": "10", "net.ipv4.ip_forward": "1", "net.ipv6.conf.all.forwarding": "0", "net.ipv4.tcp_rmem": "4096 87380 6291456"},
		}},
		"hugepages": {"hugepages", validSettings["hugepages"], &Hugepages{
			Pages1G: n(64), Transparent: "madvise",
			PerNUMA: map[int]NUMAPages{0: {Pages2M: n(1024)}, 1: {Pages2M: n(512)}},
		}},
		"cpu":                       {"cpu", validSettings["cpu"], &CPU{Governor: "performance", Isolate: "2-15,18,20-23"}},
		"iommu default":             {"iommu", `{}`, &IOMMU{Passthrough: true}},
		"iommu off":                 {"iommu", `{"passthrough": false}`, &IOMMU{}},
		"nvidia-driver":             {"nvidia-driver", `{"branch": "580"}`, &NvidiaDriver{Branch: "580"}},
		"fabric-manager":            {"fabric-manager", `{"when": "nvswitch"}`, &FabricManager{Common{When: when("nvswitch")}}},
		"gpu-settings":              {"gpu-settings", `{"powerLimitWatts": 700, "ecc": true}`, &GPUSettings{PowerLimitWatts: n(700), ECC: &yes}},
		"mig-layout":                {"mig-layout", `{"layout": {"all": ["7g.80gb"]}}`, &MIGLayout{Layout: map[string][]string{"all": {"7g.80gb"}}}},
		"gpu-sharing":               {"gpu-sharing", `{"mode": "mps", "replicas": 8}`, &GPUSharing{Mode: "mps", Replicas: 8}},
		"container-toolkit default": {"container-toolkit", `{}`, &ContainerToolkit{CDI: true}},
		"k8s-join defaults": {"k8s-join", `{"server": "https://k8s.example.com", "caCertSha256": "` + strings.Repeat("0", 64) + `", "tokenRef": "secret://k8s/token", "gpu": true}`, &K8sJoin{
			Server: "https://k8s.example.com", CACertSHA256: strings.Repeat("0", 64), TokenRef: "secret://k8s/token", GPU: true, GPUAPI: GPUAPIDevicePlugin,
		}},
		"k8s-join without gpus": {"k8s-join", `{"server": "https://k8s.example.com", "caCertSha256": "` + strings.Repeat("0", 64) + `", "tokenRef": "secret://k8s/token"}`, &K8sJoin{
			Server: "https://k8s.example.com", CACertSHA256: strings.Repeat("0", 64), TokenRef: "secret://k8s/token",
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Decode(tc.unit, []byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			// What bcd is sent again decodes to the same settings.
			text, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			again, err := Decode(tc.unit, text)
			if err != nil {
				t.Fatalf("decoding %s: %v", text, err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("after a round trip through %s (-first +again):\n%s", text, diff)
			}
		})
	}
}
