package hostconverge

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/better-compute/better-compute/proto"
)

// brief is the part of a result the pass tests compare.
type brief struct {
	Unit     string
	Status   Status
	Code     proto.Code
	Terminal bool
}

func briefs(results []UnitResult) []brief {
	out := make([]brief, len(results))
	for i, r := range results {
		out[i] = brief{r.Unit, r.Status, r.Code, r.Terminal}
	}
	return out
}

func TestConverge(t *testing.T) {
	sysctl := Unit{Name: "sysctl", Settings: []byte(`{"vm.swappiness": 10}`)}
	tests := map[string]struct {
		labels  map[string]string
		units   []Unit
		replies map[string]reply
		timeout time.Duration
		want    []brief
	}{
		"order is the built-in one, unknown units last": {
			units: []Unit{
				{Name: "gpu-overclock"},
				{Name: "iommu", Settings: []byte(`{"passthrough": false}`)},
				sysctl,
				{Name: "rdma-tuning", Settings: []byte(`{}`)},
			},
			want: []brief{{"sysctl", Changed, "", false}, {"iommu", Converged, "", false},
				{"gpu-overclock", Failed, proto.Unsupported, true}, {"rdma-tuning", Failed, proto.Unsupported, true}},
		},
		"when in the settings skips": {
			labels: map[string]string{"gpu.vendor": "amd"},
			units:  []Unit{{Name: "sysctl", Settings: []byte(`{"vm.swappiness": 10, "when": "gpu.vendor=nvidia"}`)}},
			want:   []brief{{"sysctl", Skipped, "", false}},
		},
		"when beside the settings skips": {
			units: []Unit{{Name: "sysctl", When: "nvswitch", Settings: []byte(`{"vm.swappiness": 10}`)}},
			want:  []brief{{"sysctl", Skipped, "", false}},
		},
		"when that holds applies": {
			labels: map[string]string{"gpu.vendor": "nvidia", "nvswitch": "true"},
			units:  []Unit{{Name: "sysctl", When: "nvswitch", Settings: []byte(`{"vm.swappiness": 10, "when": "gpu.vendor=nvidia"}`)}},
			want:   []brief{{"sysctl", Changed, "", false}},
		},
		"a bad when is terminal": {
			units: []Unit{{Name: "sysctl", When: "a &", Settings: []byte(`{"vm.swappiness": 10}`)}},
			want:  []brief{{"sysctl", Failed, proto.InvalidConfig, true}},
		},
		"bad settings are terminal and the others run": {
			units: []Unit{{Name: "hugepages", Settings: []byte(`{"pages2m": -1}`)}, sysctl},
			want:  []brief{{"sysctl", Changed, "", false}, {"hugepages", Failed, proto.InvalidConfig, true}},
		},
		"a unit twice": {
			units: []Unit{sysctl, sysctl},
			want:  []brief{{"sysctl", Changed, "", false}, {"sysctl", Failed, proto.InvalidConfig, true}},
		},
		"unresolved from pool is refused": {
			units: []Unit{{Name: "mig-layout", Settings: []byte(`{"from": "pool"}`)}},
			want:  []brief{{"mig-layout", Failed, proto.InvalidConfig, true}},
		},
		"a failing program fails its unit alone": {
			units:   []Unit{{Name: "gpu-settings", Settings: []byte(`{"powerLimitWatts": 700}`)}, sysctl, {Name: "iommu", Settings: []byte(`{}`)}},
			replies: map[string]reply{settingsQuery: {err: "exit status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"}, "update-grub": {}},
			want:    []brief{{"sysctl", Changed, "", false}, {"iommu", RebootRequired, "", false}, {"gpu-settings", Failed, proto.DriverError, false}},
		},
		"a hung program times its unit out": {
			units:   []Unit{sysctl, {Name: "gpu-settings", Settings: []byte(`{"powerLimitWatts": 700}`)}, {Name: "k8s-join", Settings: []byte(joinUnit)}},
			replies: map[string]reply{settingsQuery: {block: true}},
			timeout: 50 * time.Millisecond,
			want:    []brief{{"sysctl", Changed, "", false}, {"gpu-settings", Failed, proto.Timeout, false}, {"k8s-join", Changed, "", false}},
		},
		"a power limit outside the GPU's range": {
			units:   []Unit{{Name: "gpu-settings", Settings: []byte(`{"powerLimitWatts": 900}`)}},
			replies: map[string]reply{settingsQuery: {out: "0, 700.00, 100.00, 700.00, Enabled, Enabled\n"}},
			want:    []brief{{"gpu-settings", Failed, proto.InvalidConfig, true}},
		},
		"isolating a CPU the host lacks": {
			units: []Unit{{Name: "cpu", Settings: []byte(`{"isolate": "2-7"}`)}},
			want:  []brief{{"cpu", Failed, proto.InvalidConfig, true}},
		},
		"a host without GRUB": {
			units: []Unit{{Name: "iommu", Settings: []byte(`{}`)}},
			want:  []brief{{"iommu", Failed, proto.Unsupported, true}},
		},
		"a host that is not Debian": {
			units: []Unit{{Name: "nvidia-driver", Settings: []byte(`{"branch": "580"}`)}},
			want:  []brief{{"nvidia-driver", Failed, proto.Unsupported, true}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			files := with(kernelHost(), gpuHost("kubelet=1.34.1-1.1"))
			switch name {
			case "a host without GRUB":
				files = with(files, map[string]string{"/etc/default/grub": gone})
			case "a host that is not Debian":
				files = with(files, map[string]string{"/etc/os-release": "ID=rocky\nID_LIKE=\"rhel centos fedora\"\n"})
			}
			replies := merge(map[string]reply{
				kubeadmJoin: {},
			}, tc.replies)
			h := newFakeHost(t, files, replies)
			c := &Converger{Root: h.root, Runner: h, UnitTimeout: tc.timeout, Secrets: secrets{"secret://k8s/bootstrap": joinToken}}
			results := c.Converge(context.Background(), Spec{Generation: 3, Labels: tc.labels, Units: tc.units})
			if diff := cmp.Diff(tc.want, briefs(results)); diff != "" {
				t.Errorf("results (-want +got):\n%s\n%+v", diff, results)
			}
		})
	}
}

// TestConvergeMessages pins the messages an operator reads for the cases above that
// matter most.
func TestConvergeMessages(t *testing.T) {
	h := newFakeHost(t, kernelHost(), map[string]reply{settingsQuery: {block: true}})
	c := &Converger{Root: h.root, Runner: h, UnitTimeout: 20 * time.Millisecond}
	results := c.Converge(context.Background(), Spec{Units: []Unit{
		{Name: "gpu-settings", Settings: []byte(`{"ecc": true}`)},
		{Name: "sysctl", Settings: []byte(`{"kernel.modprobe": "/tmp/x"}`)},
		{Name: "sysctl", When: "lab"},
		{Name: "gpu-overclock"},
	}})
	want := []string{
		"host-config unit sysctl: kernel.modprobe is refused: the kernel runs this program as root to load modules (at kernel.modprobe)",
		"nvidia-smi --query-gpu=index,power.limit,power.min_limit,power.max_limit,ecc.mode.current,ecc.mode.pending --format=csv,noheader,nounits: the unit ran out of time: context deadline exceeded; signal: killed",
		"bcd has no converger for unit gpu-overclock; it applies kernel-modules, sysctl, hugepages, cpu, iommu, nvidia-driver, fabric-manager, gpu-settings, mig-layout, gpu-sharing, container-toolkit, k8s-join",
		"unit sysctl is in the host section twice; the registry merges a pool's unit into the profile's",
	}
	var got []string
	for _, r := range results {
		got = append(got, r.Message)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
}
