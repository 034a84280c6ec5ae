package hostconverge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/hostconverge/k8s"
	"github.com/better-compute/better-compute/hostconverge/kernel"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
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

// TestServerHostIsNoKubeadmFlag: a host of k8s-join's server starting with - would be read
// as one of kubeadm's flags (here naming the node as another) where it is an argument of
// kubeadm join, so it is refused and kubeadm is not run.
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

// TestAKubeadmOlderThan131AsksForKubernetesVersion: a unit without kubernetesVersion
// joins with a v1beta4 JoinConfiguration, which kubeadm reads from 1.31 on. On a host
// whose kubeadm package is 1.30 the unit is refused before anything changes, INVALID_CONFIG
// at kubernetesVersion, naming the version to set, and kubeadm is not run; with
// kubernetesVersion set as it says, the host joins (v1beta3). Before, kubeadm ran and
// failed on the file, with an error that does not name the setting to change.
func TestAKubeadmOlderThan131AsksForKubernetesVersion(t *testing.T) {
	h := newFakeHost(t, gpuHost("kubelet=1.30.4-1.1", "kubeadm=1.30.4-1.1"), nil)
	// kubeadm 1.30's answer to a v1beta4 file, as the exec runner reports it.
	h.answer(kubeadmJoin, reply{err: `exit status 1: no kind "JoinConfiguration" is registered for version "kubeadm.k8s.io/v1beta4" in scheme "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/scheme/scheme.go:31"`})
	c := &Converger{Root: h.root, Runner: h, Secrets: secrets{"secret://k8s/bootstrap": joinToken}}
	unit := strings.Replace(joinUnit, `"kubernetesVersion": "v1.34", `, "", 1)
	results := c.Converge(context.Background(), Spec{Units: []Unit{{Name: "k8s-join", Settings: []byte(unit)}}})
	if len(results) != 1 || results[0].Status != Failed || results[0].Code != proto.InvalidConfig ||
		!strings.Contains(results[0].Message, "set the unit's kubernetesVersion to the version the image carries (v1.30.4)") || !strings.Contains(results[0].Message, "at kubernetesVersion") {
		t.Errorf("results %+v, want the unit refused INVALID_CONFIG at kubernetesVersion, saying to set it to v1.30.4", results)
	}
	for _, call := range h.takeCalls() {
		if strings.HasPrefix(call, "kubeadm") {
			t.Errorf("ran %s", call)
		}
	}
	if _, err := os.Stat(filepath.Join(h.root, k8s.KubeletDefaults)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused unit wrote %s: %v", k8s.KubeletDefaults, err)
	}
	h.answer(kubeadmJoin, reply{effect: func(h *fakeHost) { h.write(k8s.KubeletConf, kubeletConf) }})
	unit = strings.Replace(joinUnit, `"v1.34"`, `"v1.30.4"`, 1)
	if results := c.Converge(context.Background(), Spec{Units: []Unit{{Name: "k8s-join", Settings: []byte(unit)}}}); len(results) != 1 || results[0].Status != Changed {
		t.Errorf("with kubernetesVersion v1.30.4: results %+v, want the host joined", results)
	}
}

// TestKubeadmJoinTokenOnNoCommandLine: the bootstrap token reaches kubeadm join in a
// JoinConfiguration file of mode 0600, removed once kubeadm returns, whether it joined
// or failed; no program bcd runs has it among its arguments, which every user and process
// of the host reads in /proc/PID/cmdline. Before, bcd ran kubeadm join HOST:PORT --token
// TOKEN.
func TestKubeadmJoinTokenOnNoCommandLine(t *testing.T) {
	for name, tc := range map[string]struct {
		version, apiVersion, err string
		want                     Status
	}{
		"joins":                     {"v1.34", "kubeadm.k8s.io/v1beta4", "", Changed},
		"fails":                     {"v1.34", "kubeadm.k8s.io/v1beta4", "exit status 1: couldn't validate the identity of the API Server", Failed},
		"a kubeadm older than 1.31": {"v1.30", "kubeadm.k8s.io/v1beta3", "", Changed},
	} {
		t.Run(name, func(t *testing.T) {
			var mode fs.FileMode
			var config map[string]any
			pkg := tc.version[1:] + ".4-1.1"
			h := newFakeHost(t, gpuHost("kubelet="+pkg, "kubeadm="+pkg), nil)
			h.answer(kubeadmJoin, reply{err: tc.err, effect: func(h *fakeHost) {
				path := filepath.Join(h.root, k8s.JoinConfig)
				info, err := os.Stat(path)
				if err != nil {
					t.Fatalf("kubeadm join ran without its config: %v", err)
				}
				mode = info.Mode().Perm()
				data, _ := os.ReadFile(path)
				if err := json.Unmarshal(data, &config); err != nil {
					t.Fatalf("the config is not JSON (which YAML reads): %v\n%s", err, data)
				}
				if tc.err == "" {
					h.write(k8s.KubeletConf, kubeletConf)
				}
			}})
			c := &Converger{Root: h.root, Runner: h, Secrets: secrets{"secret://k8s/bootstrap": joinToken}}
			unit := strings.Replace(joinUnit, `"v1.34"`, `"`+tc.version+`"`, 1)
			results := c.Converge(context.Background(), Spec{Units: []Unit{{Name: "k8s-join", Settings: []byte(unit)}}})
			if len(results) != 1 || results[0].Status != tc.want {
				t.Fatalf("results %+v, want %s", results, tc.want)
			}
			for _, call := range h.takeCalls() {
				if strings.Contains(call, joinToken) {
					t.Errorf("the token is on a command line: %s", call)
				}
			}
			if mode != 0o600 {
				t.Errorf("the JoinConfiguration has mode %v, want 0600", mode)
			}
			want := map[string]any{"apiVersion": tc.apiVersion, "kind": "JoinConfiguration", "discovery": map[string]any{"bootstrapToken": map[string]any{
				"apiServerEndpoint": "10.0.0.1:6443", "token": joinToken, "caCertHashes": []any{"sha256:" + strings.Repeat("ab", 32)},
			}}}
			if diff := cmp.Diff(want, config); diff != "" {
				t.Errorf("JoinConfiguration (-want +got):\n%s", diff)
			}
			if _, err := os.Stat(filepath.Join(h.root, k8s.JoinConfig)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the JoinConfiguration is still there after kubeadm join: %v", err)
			}
		})
	}
}

// TestAFailedKubeadmJoinReportsItsError: a kubeadm join that fails, here a script
// standing in for kubeadm, run by the exec runner, fails the unit with kubeadm's error,
// not the stack trace hint kubeadm closes every failure with, and no part of the secret
// half of the token is in the unit's message or bcd's log, whether kubeadm printed the
// configuration that carries it or a line too long to keep whole, whose bound falls inside
// the token. Before, the message was "kubeadm join 10.0.0.1:6443: exit status 1: To see
// the stack trace of this error execute with --v=5 or higher".
func TestAFailedKubeadmJoinReportsItsError(t *testing.T) {
	const (
		refused = "error execution phase preflight: couldn't validate the identity of the API Server: " +
			"failed to request the cluster-info ConfigMap: dial tcp 10.0.0.1:6443: connect: connection refused"
		hint  = "To see the stack trace of this error execute with --v=5 or higher"
		words = "the bootstrap token"
	)
	// pad puts the token of a line "pad words token" across the error's bound, 2 KiB.
	pad := strings.Repeat("x ", (2<<10-len(words)-len(joinToken)/2)/2)
	for name, tc := range map[string]struct {
		stderr string // a shell word; $token is the token, $config the configuration
		want   string
	}{
		"its configuration, then its error": {
			stderr: `"I1207 22:06:06.123456    4321 join.go:1] the configuration: $config` + "\n" + refused + "\n" + hint + `"`,
			want:   `kubeadm join 10.0.0.1:6443: exit status 1: I1207 22:06:06.123456    4321 join.go:1] the configuration: {"apiVersion":"kubeadm.k8s.io/v1beta4",` + `"kind":"JoinConfiguration","discovery":{"bootstrapToken":{"apiServerEndpoint":"10.0.0.1:6443","token":"<token>","caCertHashes":["sha256:` + strings.Repeat("ab", 32) + `"]}}}; ` + refused,
		},
		"a line too long, the token at its bound": {
			stderr: `"` + refused + "\n" + pad + words + ` $token is not valid"`,
			want:   "kubeadm join 10.0.0.1:6443: exit status 1: …; " + pad + words + " …",
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost(t, gpuHost("kubelet=1.34.1-1.1", "kubeadm=1.34.1-1.1"), nil)
			tools := t.TempDir()
			kubeadm := "#!/bin/sh\n" +
				"config=$(cat '" + h.root + "'\"$3\")\n" +
				`token=$(echo "$config" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')` + "\n" +
				"echo '[preflight] Running pre-flight checks'\n" +
				"echo " + tc.stderr + " >&2\n" +
				"exit 1\n"
			if err := os.WriteFile(filepath.Join(tools, "kubeadm"), []byte(kubeadm), 0o755); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			c := &Converger{Root: h.root, Runner: toolsIn(tools), Secrets: secrets{"secret://k8s/bootstrap": joinToken},
				Log: slog.New(slog.NewTextHandler(&log, nil))}
			results := c.Converge(context.Background(), Spec{Units: []Unit{{Name: "k8s-join", Settings: []byte(joinUnit)}}})
			if len(results) != 1 || results[0].Status != Failed || results[0].Code != proto.DriverError {
				t.Fatalf("results %+v, want the unit failed DRIVER_ERROR", results)
			}
			if diff := cmp.Diff(tc.want, results[0].Message); diff != "" {
				t.Errorf("message (-want +got):\n%s", diff)
			}
			if secret := joinToken[:len("abcdef.")+1]; strings.Contains(results[0].Message+log.String(), secret) {
				t.Errorf("the secret half of the token is in the message or the log:\n%s\n%s", results[0].Message, log.String())
			}
		})
	}
}

// toolsIn runs the host's programs from a directory of scripts standing in for them,
// through the exec runner.
type toolsIn string

func (d toolsIn) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return ExecRunner{}.Run(ctx, filepath.Join(string(d), name), args...)
}

// TestAJoinConfigurationAKilledBcdLeftIsRemoved: a bcd killed while kubeadm join ran left
// the JoinConfiguration, with the cluster's bootstrap token, and the temporary file of its
// write in the private directory; the next pass removes them before any unit, whatever
// units its spec has, and so does bcd's start before a spec came. Before, they stayed
// until the host booted again.
func TestAJoinConfigurationAKilledBcdLeftIsRemoved(t *testing.T) {
	const leftToken = "zyxwvu.9876543210fedcba"
	left := []string{k8s.JoinConfig, hostenv.PrivateDir + "/.kubeadm-join.yaml.tmp-812736"}
	privateFiles := func(h *fakeHost) []string {
		entries, err := os.ReadDir(filepath.Join(h.root, hostenv.PrivateDir))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	for name, converge := range map[string]func(h *fakeHost, c *Converger){
		"a pass without k8s-join": func(h *fakeHost, c *Converger) {
			c.Converge(context.Background(), Spec{Generation: 2})
		},
		"bcd's start, no spec yet": func(h *fakeHost, c *Converger) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			c.Run(ctx, make(chan Spec), &recorder{})
		},
		"a pass that joins again": func(h *fakeHost, c *Converger) {
			h.answer(kubeadmJoin, reply{effect: func(h *fakeHost) {
				if got := privateFiles(h); !cmp.Equal(got, []string{filepath.Base(k8s.JoinConfig)}) {
					t.Errorf("kubeadm join ran beside %v, want its own JoinConfiguration alone", got)
				}
				h.write(k8s.KubeletConf, kubeletConf)
			}})
			results := c.Converge(context.Background(), Spec{Units: []Unit{{Name: "k8s-join", Settings: []byte(joinUnit)}}})
			if len(results) != 1 || results[0].Status != Changed {
				t.Errorf("results %+v, want the host joined", results)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost(t, gpuHost("kubelet=1.34.1-1.1", "kubeadm=1.34.1-1.1"), nil)
			for _, f := range left {
				h.write(f, `{"discovery": {"bootstrapToken": {"token": "`+leftToken+`"}}}`)
			}
			var log bytes.Buffer
			c := &Converger{Root: h.root, Runner: h, Secrets: secrets{"secret://k8s/bootstrap": joinToken},
				Log: slog.New(slog.NewTextHandler(&log, nil))}
			converge(h, c)
			if got := privateFiles(h); len(got) != 0 {
				t.Errorf("%s still holds %v, which an earlier bcd left with the bootstrap token", hostenv.PrivateDir, got)
			}
			for _, f := range left {
				if !strings.Contains(log.String(), f) {
					t.Errorf("the log does not name %s, which was removed:\n%s", f, log.String())
				}
			}
		})
	}
}
