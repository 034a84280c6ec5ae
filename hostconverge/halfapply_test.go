package hostconverge

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/hostconverge/debpkg"
	"github.com/better-compute/better-compute/hostconverge/k8s"
	"github.com/better-compute/better-compute/testkit/crashpoint"
)

// TestMPSReloadedAfterAFailedReload: the MPS service file changed and systemctl
// daemon-reload failed; the next pass, finding the file as the unit wants it, still
// reloads systemd and restarts the service, else the daemon would run on with the old
// share of the GPU while every pass reports the unit converged.
func TestMPSReloadedAfterAFailedReload(t *testing.T) {
	const svc = "better-compute-mps.service"
	h := newFakeHost(t, map[string]string{mpsService: "# an older file\n"}, merge(active(svc), map[string]reply{
		"systemctl daemon-reload":  {err: "exit status 1: Failed to reload daemon: Connection timed out"},
		"systemctl restart " + svc: {},
	}))
	c := &Converger{Root: h.root, Runner: h}
	spec := Spec{Units: []Unit{{Name: "gpu-sharing", Settings: []byte(`{"mode": "mps", "replicas": 4}`)}}}
	if results := c.Converge(context.Background(), spec); results[0].Status != Failed {
		t.Fatalf("first pass: %+v, want failed", results)
	}
	h.answer("systemctl daemon-reload", reply{})
	h.takeCalls()
	results := c.Converge(context.Background(), spec)
	calls := h.takeCalls()
	if !slices.Contains(calls, "systemctl daemon-reload") || !slices.Contains(calls, "systemctl restart "+svc) {
		t.Errorf("the next pass did not apply the service file: %s %q; calls %q", results[0].Status, results[0].Corrections, calls)
	}
	results = c.Converge(context.Background(), spec)
	assertQuiet(t, results, h.takeCalls(), "")
}

// TestKubeletRestartedAfterAFailedRestart: the kubelet's labels changed and its restart
// failed; the next pass, finding the file as the unit wants it, still restarts the
// kubelet, else it would run on with the old labels and taints.
func TestKubeletRestartedAfterAFailedRestart(t *testing.T) {
	h := newFakeHost(t, with(gpuHost("kubelet=1.34.1-1.1", "kubeadm=1.34.1-1.1"), map[string]string{
		k8s.KubeletConf:     kubeletConf,
		k8s.KubeletDefaults: "KUBELET_EXTRA_ARGS=\"--node-labels=example.com/pool=a100\"\n",
	}), map[string]reply{"systemctl restart kubelet": {err: "exit status 1: Failed to restart kubelet.service: Transaction for kubelet.service/restart is destructive"}})
	c := &Converger{Root: h.root, Runner: h}
	spec := Spec{Units: []Unit{{Name: "k8s-join", Settings: []byte(joinUnit)}}}
	if results := c.Converge(context.Background(), spec); results[0].Status != Failed {
		t.Fatalf("first pass: %+v, want failed", results)
	}
	h.answer("systemctl restart kubelet", reply{})
	h.takeCalls()
	results := c.Converge(context.Background(), spec)
	if calls := h.takeCalls(); !slices.Contains(calls, "systemctl restart kubelet") {
		t.Errorf("the next pass did not restart the kubelet: %s %q; calls %q", results[0].Status, results[0].Corrections, calls)
	}
	results = c.Converge(context.Background(), spec)
	assertQuiet(t, results, h.takeCalls(), "")
}

// grubCfg is what the fake update-grub writes: the drop-ins it applied.
const grubCfg = "/boot/grub/grub.cfg"

// updateGRUB is update-grub on the fake host: it writes grubCfg from the drop-ins, through
// a temporary file renamed into place, as grub-mkconfig does.
func updateGRUB(h *fakeHost) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Join(h.root, "boot/grub"), 0o755); err != nil {
		h.t.Fatal(err)
	}
	tmp := filepath.Join(h.root, grubCfg+".new")
	if err := os.WriteFile(tmp, []byte(appliedDropIns(h)), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(h.root, grubCfg)); err != nil {
		h.t.Fatal(err)
	}
}

// appliedDropIns is the drop-ins of the fake host, as update-grub would take them.
func appliedDropIns(h *fakeHost) string {
	var b strings.Builder
	names, _ := filepath.Glob(filepath.Join(h.root, "etc/default/grub.d/*.cfg"))
	for _, name := range names {
		data, _ := os.ReadFile(name)
		b.Write(data)
	}
	return b.String()
}

// bootUnits set kernel parameters through their drop-ins.
var bootUnits = Spec{Units: []Unit{
	{Name: "iommu", Settings: []byte(`{}`)},
	{Name: "cpu", Settings: []byte(`{"isolate": "2-3"}`)},
}}

// TestBootParamsChild is the child of TestKilledPassLeavesGRUBApplied: one pass of
// bootUnits on the host tree its parent names.
func TestBootParamsChild(t *testing.T) {
	root := crashpoint.Child(t)
	h := &fakeHost{t: t, root: root, replies: map[string]reply{"update-grub": {effect: updateGRUB}}}
	c := &Converger{Root: root, Runner: h}
	c.Converge(context.Background(), bootUnits)
}

// TestKilledPassLeavesGRUBApplied: bcd killed at any moment of a pass that changes the
// kernel parameters (its service stopped while update-grub runs, the machine losing
// power), the next pass leaves GRUB's configuration made from the drop-ins as they are:
// a drop-in that a killed pass wrote is not taken as applied, which would leave the unit
// asking for a reboot that never brings the parameters.
func TestKilledPassLeavesGRUBApplied(t *testing.T) {
	kills := crashpoint.EachKill(t, "TestBootParamsChild", func() string {
		return newFakeHost(t, kernelHost(), nil).root
	}, func(root, call string, n int) {
		h := &fakeHost{t: t, root: root, replies: map[string]reply{"update-grub": {effect: updateGRUB}}}
		c := &Converger{Root: root, Runner: h}
		c.Converge(context.Background(), bootUnits)
		cfg, _ := os.ReadFile(filepath.Join(root, grubCfg))
		if want := appliedDropIns(h); string(cfg) != want || !strings.Contains(want, "iommu=pt") {
			t.Errorf("killed at %s #%d, the next pass left %s holding\n%s\nwhile the drop-ins are\n%s", call, n, grubCfg, cfg, want)
		}
	})
	if kills == 0 {
		t.Fatal("the child was never killed")
	}
}

// TestInterruptedInstallIsFinished: an install killed half-way (the unit out of its time,
// bcd's service stopped) leaves dpkg's journal, and apt-get then refuses every install
// until dpkg --configure -a finishes it; the next pass finishes it and installs, rather
// than failing on every pass until a person logs in.
func TestInterruptedInstallIsFinished(t *testing.T) {
	const (
		install   = "apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold nvidia-driver-580-open"
		configure = "dpkg --force-confdef --force-confold --configure -a"
	)
	status := strings.Replace(dpkg("nvidia-driver-580-open=580.95.05-0ubuntu1"), "install ok installed", "install ok half-configured", 1)
	h := newFakeHost(t, with(gpuHost(), map[string]string{debpkg.StatusFile: status, debpkg.Journal + "/0007": "Package: nvidia-driver-580-open\n"}), map[string]reply{
		"apt-get update -q": {},
		install:             {err: "exit status 100: E: dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the problem."},
		configure: {effect: func(h *fakeHost) {
			if err := os.Remove(filepath.Join(h.root, debpkg.Journal, "0007")); err != nil {
				h.t.Fatal(err)
			}
			installs(nil, "nvidia-driver-580-open=580.95.05-0ubuntu1")(h)
			h.answer(install, reply{})
		}},
	})
	c := &Converger{Root: h.root, Runner: h}
	results := c.Converge(context.Background(), Spec{Units: []Unit{{Name: "nvidia-driver", Settings: []byte(`{"branch": "580", "open": true}`)}}})
	calls := h.takeCalls()
	if results[0].Status != RebootRequired || !slices.Contains(calls, configure) {
		t.Errorf("result %+v after calls %q; want dpkg's interrupted run finished and the driver waiting for a reboot", results[0], calls)
	}
}

// TestChangedConffilesAskNothing: a conffile the host changed that the package's new
// version changes too (a driver's /etc/modprobe.d file, say) makes dpkg ask which to
// keep. bcd's programs read no terminal: dpkg reads end of file at its prompt and fails
// the package, and the unit with it on every pass. dpkg --configure -a and apt-get
// install keep the host's file where dpkg would ask, and take dpkg's default where it
// has one (the package's new file for one the host never changed).
func TestChangedConffilesAskNothing(t *testing.T) {
	const (
		prompt    = "exit status 1: dpkg: error processing package nvidia-kernel-common-580 (--configure): end of file on stdin at conffile prompt"
		aptFailed = "exit status 100: E: Sub-process /usr/bin/dpkg returned an error code (1)"
		install   = "apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold nvidia-driver-580-open"
		configure = "dpkg --force-confdef --force-confold --configure -a"
	)
	status := strings.Replace(dpkg("nvidia-kernel-common-580=580.95.05-0ubuntu1"), "install ok installed", "install ok half-configured", 1)
	h := newFakeHost(t, with(gpuHost(), map[string]string{debpkg.StatusFile: status, debpkg.Journal + "/0007": "Package: nvidia-kernel-common-580\n"}), map[string]reply{
		"apt-get update -q":   {},
		"dpkg --configure -a": {err: prompt},
		"apt-get install -y -q --no-install-recommends nvidia-driver-580-open": {err: prompt + "\n" + aptFailed},
		configure: {effect: func(h *fakeHost) {
			if err := os.Remove(filepath.Join(h.root, debpkg.Journal, "0007")); err != nil {
				h.t.Fatal(err)
			}
			installs(nil, "nvidia-kernel-common-580=580.95.05-0ubuntu1")(h)
		}},
		install: {effect: installs(nil, "nvidia-driver-580-open=580.95.05-0ubuntu1")},
	})
	c := &Converger{Root: h.root, Runner: h}
	results := c.Converge(context.Background(), Spec{Units: []Unit{{Name: "nvidia-driver", Settings: []byte(`{"branch": "580", "open": true}`)}}})
	calls := h.takeCalls()
	if results[0].Status != RebootRequired || !slices.Contains(calls, configure) || !slices.Contains(calls, install) {
		t.Errorf("result %+v after calls %q; want dpkg's run finished and the driver installed, asking nothing", results[0], calls)
	}
}
