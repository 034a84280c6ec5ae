package hostconverge

import (
	"context"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/hostconverge/k8s"
	"github.com/better-compute/better-compute/hostconverge/kernel"
	"github.com/better-compute/better-compute/proto"
)

// TestSysctlNameCannotSilenceItsGuard: a sysctl name with a leading -, which sysctl.d
// reads as "set this, ignoring a failure" and the guard did not know, is refused before
// any file is written: written, it would have the next boot set kernel.modprobe, a
// program the kernel runs as root.
func TestSysctlNameCannotSilenceItsGuard(t *testing.T) {
	h := newFakeHost(t, kernelHost(), nil)
	c := &Converger{Root: h.root, Runner: h}
	results := c.Converge(context.Background(), Spec{Units: []Unit{
		{Name: "sysctl", Settings: []byte(`{"vm.swappiness": 10, "-kernel.modprobe": "/var/tmp/payload"}`)},
	}})
	if len(results) != 1 || results[0].Status != Failed || results[0].Code != proto.InvalidConfig {
		t.Errorf("results %+v, want the unit refused with INVALID_CONFIG", results)
	}
	if conf := h.snapshot()[kernel.SysctlConf]; strings.Contains(conf, "modprobe") {
		t.Errorf("%s sets kernel.modprobe for the next boot:\n%s", kernel.SysctlConf, conf)
	}
}

// TestModuleNameIsNoOption: a module name starting with - would reach modprobe as one of
// its options; it is refused, and modprobe is not run.
func TestModuleNameIsNoOption(t *testing.T) {
	h := newFakeHost(t, kernelHost(), map[string]reply{"modprobe --remove": {}})
	c := &Converger{Root: h.root, Runner: h}
	results := c.Converge(context.Background(), Spec{Units: []Unit{
		{Name: "kernel-modules", Settings: []byte(`{"load": ["--remove"]}`)},
	}})
	if len(results) != 1 || results[0].Status != Failed || results[0].Code != proto.InvalidConfig {
		t.Errorf("results %+v, want the unit refused with INVALID_CONFIG", results)
	}
	for _, call := range h.takeCalls() {
		if strings.HasPrefix(call, "modprobe -") {
			t.Errorf("ran %s", call)
		}
	}
}

// TestServerHostIsNoKubeadmFlag: the host of k8s-join's server is kubeadm join's first
// argument; a host starting with - would be read as one of kubeadm's flags (here naming
// the node as another), so it is refused and kubeadm is not run.
func TestServerHostIsNoKubeadmFlag(t *testing.T) {
	h := newFakeHost(t, gpuHost("kubelet=1.34.1-1.1", "kubeadm=1.34.1-1.1"), nil)
	c := &Converger{Root: h.root, Runner: h, Secrets: secrets{"secret://k8s/bootstrap": joinToken}}
	unit := strings.Replace(joinUnit, "https://10.0.0.1:6443", "https://--node-name=gpu-node-7:6443", 1)
	results := c.Converge(context.Background(), Spec{Units: []Unit{{Name: "k8s-join", Settings: []byte(unit)}}})
	if len(results) != 1 || results[0].Status != Failed || results[0].Code != proto.InvalidConfig {
		t.Errorf("results %+v, want the unit refused with INVALID_CONFIG", results)
	}
	for _, call := range h.takeCalls() {
		if strings.HasPrefix(call, "kubeadm") {
			t.Errorf("ran %s", call)
		}
	}
}

// TestJoinedElsewhereWithALongKubeconfigLine: a host joined to another cluster is refused
// whatever its kubelet.conf holds before the server line, here a CA bundle written on one
// line longer than 64 KiB, which stopped the reading before the server and let the unit
// take the host as joined to its own cluster.
func TestJoinedElsewhereWithALongKubeconfigLine(t *testing.T) {
	conf := "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: " + strings.Repeat("TUlJQy", 12<<10) + "\n    server: https://10.9.9.9:6443\n  name: default-cluster\n"
	h := newFakeHost(t, with(gpuHost("kubelet=1.34.1-1.1", "kubeadm=1.34.1-1.1"), map[string]string{k8s.KubeletConf: conf}), map[string]reply{"systemctl restart kubelet": {}})
	c := &Converger{Root: h.root, Runner: h}
	results := c.Converge(context.Background(), Spec{Units: []Unit{{Name: "k8s-join", Settings: []byte(joinUnit)}}})
	if len(results) != 1 || results[0].Status != Failed || results[0].Code != proto.InvalidState {
		t.Errorf("results %+v, want the host refused with INVALID_STATE: it belongs to the cluster at 10.9.9.9", results)
	}
}
