package hostunit

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
)

func TestOrder(t *testing.T) {
	want := []string{"kernel-modules", "sysctl", "hugepages", "cpu", "iommu", "nvidia-driver",
		"fabric-manager", "gpu-settings", "mig-layout", "gpu-sharing", "container-toolkit", "k8s-join"}
	if diff := cmp.Diff(want, Order()); diff != "" {
		t.Errorf("Order (-want +got):\n%s", diff)
	}
	if Known("gpu-overclock") {
		t.Error("an unknown unit is known")
	}
	for _, name := range want {
		if !Known(name) {
			t.Errorf("%s is not known", name)
		}
		if s := units[indexOf(name)].settings(); s.Unit() != name {
			t.Errorf("settings of %s say they are %s", name, s.Unit())
		}
	}
}

func indexOf(name string) int {
	for i, u := range units {
		if u.name == name {
			return i
		}
	}
	return -1
}

// validSettings is one accepted document per unit, every field set.
var validSettings = map[string]string{
	"kernel-modules":    `{"load": ["nvidia", "nvidia_uvm", "ib-umad"], "options": {"nvidia": "NVreg_EnableGpuFirmware=1 NVreg_OpenRmEnableUnsupportedGpus=0", "nvidia-drm": "modeset=1"}, "when": "gpu.vendor=nvidia"}`,
	"sysctl":            `{"vm.swappiness": 10, "net.core.rmem_max": "268435456", "net.ipv4.ip_forward": true, "net.ipv4.tcp_rmem": "4096 87380 6291456", "net.ipv4.conf.eth0/100.rp_filter": 0, "kernel.core_pattern": "/var/crash/core.%e.%p", "kernel.randomize_va_space": 2, "kernel.sysrq": 176, "when": "lab"}`,
	"hugepages":         `{"pages1g": 64, "transparent": "madvise", "perNuma": {"0": {"pages2m": 1024}, "1": {"pages2m": 512}}}`,
	"cpu":               `{"governor": "performance", "isolate": "2-15,18,20-23"}`,
	"iommu":             `{"passthrough": false}`,
	"nvidia-driver":     `{"branch": "580", "open": true}`,
	"fabric-manager":    `{"when": "nvswitch"}`,
	"gpu-settings":      `{"powerLimitWatts": 700, "ecc": true}`,
	"mig-layout":        `{"layout": {"all": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb+me"], "0": []}}`,
	"gpu-sharing":       `{"mode": "timeslice", "replicas": 4}`,
	"container-toolkit": `{"cdi": false}`,
	"k8s-join":          `{"server": "https://10.0.0.1:6443", "caCertSha256": "` + strings.Repeat("ab", 32) + `", "tokenRef": "secret://k8s/bootstrap-token", "kubernetesVersion": "v1.34.1", "nodeLabels": {"example.com/pool": "gpu-a", "node.kubernetes.io/instance-type": "h100x8", "topology.kubernetes.io/zone": "z1", "plain": ""}, "taints": ["nvidia.com/gpu=present:NoSchedule", "dedicated:NoExecute"], "gpu": true, "gpuApi": "dra"}`,
}

func TestValidateAccepts(t *testing.T) {
	for _, name := range Order() {
		t.Run(name, func(t *testing.T) {
			if problems := Validate(name, []byte(validSettings[name])); len(problems) > 0 {
				t.Errorf("problems: %v", problems)
			}
		})
	}
	t.Run("mig-layout from pool", func(t *testing.T) {
		if problems := Validate("mig-layout", []byte(`{"from": "pool"}`)); len(problems) > 0 {
			t.Errorf("problems: %v", problems)
		}
	})
}

func TestValidateRefuses(t *testing.T) {
	tests := map[string]struct {
		unit, doc string
		path      jsondoc.Path
		msg       string
	}{
		"unknown unit":            {"gpu-overclock", `{}`, "", `unknown host-config unit "gpu-overclock"`},
		"not json":                {"iommu", `{"passthrough": tru}`, "passthrough", `unexpected "tru"`},
		"not an object":           {"iommu", `true`, "", "must be an object, not a boolean"},
		"unknown setting":         {"iommu", `{"passthru": true}`, "passthru", `unknown field "passthru"`},
		"when not a string":       {"iommu", `{"when": 1}`, "when", "must be a string"},
		"when syntax":             {"iommu", `{"when": "a &"}`, "when", "label expression, column 3: write && for and"},
		"load not a list":         {"kernel-modules", `{"load": "nvidia"}`, "load", "must be an array"},
		"module name charset":     {"kernel-modules", `{"load": ["nvidia", "Nvidia"]}`, "load[1]", `"Nvidia" is not a module name`},
		"module name length":      {"kernel-modules", `{"load": ["` + strings.Repeat("a", 56) + `"]}`, "load[0]", "is not a module name"},
		"module name dash":        {"kernel-modules", `{"load": ["--remove"]}`, "load[0]", "starting with a letter or digit"},
		"options module dash":     {"kernel-modules", `{"options": {"-a": "b=1"}}`, "options.-a", "starting with a letter or digit"},
		"module listed twice":     {"kernel-modules", `{"load": ["nvidia_drm", "nvidia-drm"]}`, "load[1]", "module nvidia-drm is listed twice"},
		"too many modules":        {"kernel-modules", `{"load": [` + strings.Repeat(`"a",`, 256) + `"a"]}`, "load", "more than the 256 allowed"},
		"options module name":     {"kernel-modules", `{"options": {"nv/idia": "a=1"}}`, "options.nv/idia", "is not a module name"},
		"options not a string":    {"kernel-modules", `{"options": {"nvidia": ["a=1"]}}`, "options.nvidia", "must be a string"},
		"options token":           {"kernel-modules", `{"options": {"nvidia": "a=1 modeset"}}`, "options.nvidia", `"modeset" is not key=value`},
		"options newline":         {"kernel-modules", `{"options": {"nvidia": "a=1\nb=2"}}`, "options.nvidia", "must be one line"},
		"options empty":           {"kernel-modules", `{"options": {"nvidia": " "}}`, "options.nvidia", "is empty"},
		"options quote":           {"kernel-modules", `{"options": {"nvidia": "a=\"x\""}}`, "options.nvidia", "without quotes"},
		"options comment":         {"kernel-modules", `{"options": {"nvidia": "a=1#x"}}`, "options.nvidia", "or #"},
		"options empty value":     {"kernel-modules", `{"options": {"nvidia": "a="}}`, "options.nvidia", "the value of a must be"},
		"options param name":      {"kernel-modules", `{"options": {"nvidia": "a.b=1"}}`, "options.nvidia", `"a.b" is not a parameter name`},
		"options param twice":     {"kernel-modules", `{"options": {"nvidia": "a_b=1 a-b=2"}}`, "options.nvidia", "parameter a-b is set twice"},
		"options module twice":    {"kernel-modules", `{"options": {"nvidia_drm": "a=1", "nvidia-drm": "b=1"}}`, "options.nvidia-drm", "has options twice"},
		"sysctl not dotted":       {"sysctl", `{"swappiness": 1}`, "swappiness", "is not a sysctl name"},
		"sysctl upper case":       {"sysctl", `{"vm.Swappiness": 1}`, "vm.Swappiness", "is not a sysctl name"},
		"sysctl empty part":       {"sysctl", `{"vm..swappiness": 1}`, "vm..swappiness", "is not a sysctl name"},
		"sysctl slash part":       {"sysctl", `{"net.//.x": 1}`, "net.//.x", "is not a sysctl name"},
		"sysctl leading dash":     {"sysctl", `{"-kernel.modprobe": "/tmp/x"}`, "-kernel.modprobe", "not starting with -"},
		"sysctl null":             {"sysctl", `{"vm.swappiness": null}`, "vm.swappiness", "must be a string, a whole number or a boolean, not null"},
		"sysctl object":           {"sysctl", `{"vm.swappiness": {}}`, "vm.swappiness", "not an object"},
		"sysctl fraction":         {"sysctl", `{"vm.swappiness": 1.5}`, "vm.swappiness", "must be a whole number"},
		"sysctl newline":          {"sysctl", `{"net.ipv4.tcp_rmem": "1\n2"}`, "net.ipv4.tcp_rmem", "must be one line"},
		"sysctl tab":              {"sysctl", `{"net.ipv4.tcp_rmem": "1\t2"}`, "net.ipv4.tcp_rmem", "must be one line"},
		"sysctl line separator":   {"sysctl", `{"net.ipv4.tcp_rmem": "1\u20282"}`, "net.ipv4.tcp_rmem", "must be one line"},
		"sysctl when":             {"sysctl", `{"when": "(a"}`, "when", "expected ) to close"},
		"hugepages negative":      {"hugepages", `{"pages2m": -1}`, "pages2m", "-1 is not a whole number from 0 to 16777216"},
		"hugepages string":        {"hugepages", `{"pages1g": "4"}`, "pages1g", "must be a whole number from 0 to 32768, not a string"},
		"hugepages fraction":      {"hugepages", `{"pages1g": 4.5}`, "pages1g", "4.5 must be a whole number"},
		"hugepages too many":      {"hugepages", `{"pages1g": 32769}`, "pages1g", "not a whole number from 0 to 32768"},
		"transparent":             {"hugepages", `{"transparent": "sometimes"}`, "transparent", `"sometimes" is not one of "always", "madvise" or "never"`},
		"perNuma node id":         {"hugepages", `{"perNuma": {"01": {"pages2m": 1}}}`, "perNuma.01", "is not a NUMA node id"},
		"perNuma node too high":   {"hugepages", `{"perNuma": {"1024": {"pages2m": 1}}}`, "perNuma.1024", "is not a NUMA node id"},
		"perNuma empty node":      {"hugepages", `{"perNuma": {"0": {}}}`, "perNuma.0", "set pages2m or pages1g"},
		"perNuma unknown":         {"hugepages", `{"perNuma": {"0": {"pages4k": 1}}}`, "perNuma.0.pages4k", "unknown field"},
		"perNuma and global":      {"hugepages", `{"pages2m": 10, "perNuma": {"0": {"pages2m": 1}}}`, "perNuma.0.pages2m", "set it either machine-wide or per NUMA node"},
		"perNuma global after":    {"hugepages", `{"perNuma": {"0": {"pages1g": 1}}, "pages1g": 2}`, "perNuma.0.pages1g", "pages1g is set machine-wide too"},
		"perNuma negative":        {"hugepages", `{"perNuma": {"0": {"pages1g": -2}}}`, "perNuma.0.pages1g", "is not a whole number"},
		"governor":                {"cpu", `{"governor": "turbo"}`, "governor", `"turbo" is not one of "performance", "schedutil", "ondemand" or "powersave"`},
		"isolate cpu 0":           {"cpu", `{"isolate": "0-3"}`, "isolate", "CPU 0 cannot be isolated"},
		"isolate syntax":          {"cpu", `{"isolate": "2-15, 18"}`, "isolate", `" 18" is not a CPU number`},
		"isolate not a string":    {"cpu", `{"isolate": 2}`, "isolate", "must be a string"},
		"passthrough not a bool":  {"iommu", `{"passthrough": "true"}`, "passthrough", "must be a boolean, not a string"},
		"branch missing":          {"nvidia-driver", `{"open": true}`, "branch", "branch is required"},
		"branch two digits":       {"nvidia-driver", `{"branch": "58"}`, "branch", `"58" is not a driver branch`},
		"branch version":          {"nvidia-driver", `{"branch": "580.65.06"}`, "branch", "three digits"},
		"branch number":           {"nvidia-driver", `{"branch": 580}`, "branch", "must be a string, not a number"},
		"open not a bool":         {"nvidia-driver", `{"branch": "580", "open": 1}`, "open", "must be a boolean"},
		"fabric-manager setting":  {"fabric-manager", `{"enabled": true}`, "enabled", `unknown field "enabled"; the fields are "when"`},
		"power limit zero":        {"gpu-settings", `{"powerLimitWatts": 0}`, "powerLimitWatts", "0 is not a whole number from 1 to 10000"},
		"power limit high":        {"gpu-settings", `{"powerLimitWatts": 10001}`, "powerLimitWatts", "from 1 to 10000"},
		"ecc not a bool":          {"gpu-settings", `{"ecc": "on"}`, "ecc", "must be a boolean"},
		"mig neither":             {"mig-layout", `{"when": "a"}`, "", `set from: "pool" or a layout`},
		"mig both":                {"mig-layout", `{"from": "pool", "layout": {"all": []}}`, "layout", "from is set already"},
		"mig both layout first":   {"mig-layout", `{"layout": {"all": []}, "from": "pool"}`, "from", "layout is set already"},
		"mig from":                {"mig-layout", `{"from": "node"}`, "from", `"node" is not one of "pool"`},
		"mig empty layout":        {"mig-layout", `{"layout": {}}`, "layout", `name "all" or GPU indices`},
		"mig gpu index":           {"mig-layout", `{"layout": {"gpu0": ["1g.10gb"]}}`, "layout.gpu0", `"gpu0" is not "all" or a GPU index`},
		"mig gpu index too high":  {"mig-layout", `{"layout": {"64": ["1g.10gb"]}}`, "layout.64", "from 0 to 63"},
		"mig profile name":        {"mig-layout", `{"layout": {"all": ["1g.10GB"]}}`, "layout.all[0]", "is not a GPU instance profile"},
		"mig slices":              {"mig-layout", `{"layout": {"0": ["5g.50gb"]}}`, "layout.0[0]", "1, 2, 3, 4 or 7 compute slices"},
		"mig too many slices":     {"mig-layout", `{"layout": {"0": ["4g.40gb", "4g.40gb"]}}`, "layout.0", "take 8 compute slices; a GPU has 7"},
		"mig too many instances":  {"mig-layout", `{"layout": {"0": ["1g.10gb","1g.10gb","1g.10gb","1g.10gb","1g.10gb","1g.10gb","1g.10gb","1g.10gb"]}}`, "layout.0", "more than the 7 allowed"},
		"sharing mode":            {"gpu-sharing", `{"mode": "mig", "replicas": 2}`, "mode", `"mig" is not one of "mps" or "timeslice"`},
		"sharing replicas zero":   {"gpu-sharing", `{"mode": "mps", "replicas": 0}`, "replicas", "0 is not a whole number from 1 to 48"},
		"sharing replicas high":   {"gpu-sharing", `{"mode": "mps", "replicas": 49}`, "replicas", "from 1 to 48"},
		"sharing mode missing":    {"gpu-sharing", `{"replicas": 2}`, "mode", "mode is required"},
		"sharing replicas absent": {"gpu-sharing", `{"mode": "mps"}`, "replicas", "replicas is required"},
		"cdi not a bool":          {"container-toolkit", `{"cdi": null}`, "cdi", "must be a boolean, not null"},
		"k8s server missing":      {"k8s-join", `{"caCertSha256": "` + strings.Repeat("a", 64) + `", "tokenRef": "secret://t"}`, "server", "server is required"},
		"k8s server http":         {"k8s-join", k8s(`"server": "http://10.0.0.1:6443"`), "server", "is not an https URL"},
		"k8s server no host":      {"k8s-join", k8s(`"server": "https://:6443"`), "server", "is not an https URL"},
		"k8s server dash host":    {"k8s-join", k8s(`"server": "https://--node-name=n7:6443"`), "server", "host may not start with -"},
		"k8s server user":         {"k8s-join", k8s(`"server": "https://admin:pw@10.0.0.1:6443"`), "server", "may not carry user info"},
		"k8s server query":        {"k8s-join", k8s(`"server": "https://10.0.0.1:6443/?a=b"`), "server", "may not carry a query"},
		"k8s server space":        {"k8s-join", k8s(`"server": "https://10.0.0.1/a b"`), "server", "is not an https URL"},
		"k8s ca prefix":           {"k8s-join", k8s(`"caCertSha256": "sha256:` + strings.Repeat("a", 64) + `"`), "caCertSha256", "without the sha256: prefix"},
		"k8s ca upper case":       {"k8s-join", k8s(`"caCertSha256": "` + strings.Repeat("A", 64) + `"`), "caCertSha256", "64 lower-case hex digits"},
		"k8s ca short":            {"k8s-join", k8s(`"caCertSha256": "abc"`), "caCertSha256", "64 lower-case hex digits"},
		"k8s token plain":         {"k8s-join", k8s(`"tokenRef": "abcdef.0123456789abcdef"`), "tokenRef", "must be a secret reference"},
		"k8s token dot dot":       {"k8s-join", k8s(`"tokenRef": "secret://a/../b"`), "tokenRef", "must be a secret reference"},
		"k8s token empty":         {"k8s-join", k8s(`"tokenRef": "secret://"`), "tokenRef", "must be a secret reference"},
		"k8s version":             {"k8s-join", k8s(`"kubernetesVersion": "1.34"`), "kubernetesVersion", `"1.34" is not a Kubernetes version`},
		"k8s version long":        {"k8s-join", k8s(`"kubernetesVersion": "v1.34.1.2"`), "kubernetesVersion", "is not a Kubernetes version"},
		"k8s label key":           {"k8s-join", k8s(`"nodeLabels": {"-bad": "x"}`), "nodeLabels.-bad", "the name must be at most 63"},
		"k8s label prefix":        {"k8s-join", k8s(`"nodeLabels": {"Example.com/a": "x"}`), "nodeLabels.Example.com/a", "the prefix must be a lower-case DNS subdomain"},
		"k8s label value":         {"k8s-join", k8s(`"nodeLabels": {"a": "x y"}`), "nodeLabels.a", `"x y" is not a label value`},
		"k8s label value long":    {"k8s-join", k8s(`"nodeLabels": {"a": "` + strings.Repeat("v", 64) + `"}`), "nodeLabels.a", "is not a label value"},
		"k8s label not string":    {"k8s-join", k8s(`"nodeLabels": {"a": true}`), "nodeLabels.a", "must be a string"},
		"k8s node-role label":     {"k8s-join", k8s(`"nodeLabels": {"node-role.kubernetes.io/worker": ""}`), "nodeLabels.node-role.kubernetes.io/worker", "may not label itself in the node-role.kubernetes.io namespace"},
		"k8s node-restriction":    {"k8s-join", k8s(`"nodeLabels": {"node-restriction.kubernetes.io/x": "y"}`), "nodeLabels.node-restriction.kubernetes.io/x", "may not label itself"},
		"k8s k8s.io label":        {"k8s-join", k8s(`"nodeLabels": {"k8s.io/x": "y"}`), "nodeLabels.k8s.io/x", "may not label itself"},
		"k8s taint effect":        {"k8s-join", k8s(`"taints": ["a=b:NoRun"]`), "taints[0]", "the effect must be NoSchedule"},
		"k8s taint no effect":     {"k8s-join", k8s(`"taints": ["a=b"]`), "taints[0]", "is not a taint"},
		"k8s taint key":           {"k8s-join", k8s(`"taints": ["a b=c:NoSchedule"]`), "taints[0]", "taint key"},
		"k8s taint value":         {"k8s-join", k8s(`"taints": ["a=b c:NoSchedule"]`), "taints[0]", "taint value"},
		"k8s taints not a list":   {"k8s-join", k8s(`"taints": "a:NoSchedule"`), "taints", "must be an array"},
		"k8s gpu not a bool":      {"k8s-join", k8s(`"gpu": "yes"`), "gpu", "must be a boolean"},
		"k8s gpuApi":              {"k8s-join", k8s(`"gpu": true, "gpuApi": "cdi"`), "gpuApi", `"cdi" is not one of "device-plugin" or "dra"`},
		"k8s gpuApi without gpu":  {"k8s-join", k8s(`"gpuApi": "dra"`), "gpuApi", "gpuApi dra needs gpu: true"},
		"k8s gpuApi gpu false":    {"k8s-join", k8s(`"gpu": false, "gpuApi": "dra"`), "gpuApi", "needs gpu: true"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			problems := Validate(tc.unit, []byte(tc.doc))
			if len(problems) == 0 {
				t.Fatal("accepted")
			}
			if got := problems[0]; got.Path != tc.path || !strings.Contains(got.Message, tc.msg) {
				t.Errorf("first problem at %q: %q\nwant at %q, containing %q", got.Path, got.Message, tc.path, tc.msg)
			}
		})
	}
}

// k8s returns a valid k8s-join document with the fields in extra replacing or adding to
// the required ones.
func k8s(extra string) string {
	fields := map[string]string{
		"server":       `"server": "https://10.0.0.1:6443"`,
		"caCertSha256": `"caCertSha256": "` + strings.Repeat("a", 64) + `"`,
		"tokenRef":     `"tokenRef": "secret://t"`,
	}
	var parts []string
	for _, name := range []string{"server", "caCertSha256", "tokenRef"} {
		if !strings.HasPrefix(extra, `"`+name+`"`) {
			parts = append(parts, fields[name])
		}
	}
	return "{" + strings.Join(append(parts, extra), ", ") + "}"
}

func TestValidateReportsEveryProblemInDocumentOrder(t *testing.T) {
	doc := `{"pages2m": -1, "transparent": "x", "pages1g": 1, "perNuma": {"0": {"pages1g": 2}, "x": {}}, "when": ""}`
	var got []jsondoc.Path
	for _, p := range Validate("hugepages", []byte(doc)) {
		got = append(got, p.Path)
	}
	want := []jsondoc.Path{"pages2m", "transparent", "perNuma.0.pages1g", "perNuma.x", "when"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
}

func TestDecodeError(t *testing.T) {
	_, err := Decode("nvidia-driver", []byte(`{"branch": "5800"}`))
	var e *proto.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not a *proto.Error", err)
	}
	if e.Code != proto.InvalidConfig || e.Details.Path != "branch" {
		t.Errorf("got %s at %q, want INVALID_CONFIG at branch", e.Code, e.Details.Path)
	}
}
