package replicas

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/testkit"
)

// fleet is three registry processes on one etcd cluster, as the README runs them: the
// first makes the key-encryption key file; the others start with a copy of it and of
// the first one's admin.conf, each in a data directory of its own, all given every
// replica's agent endpoint.
type fleet struct {
	cluster *etcdtest.Cluster
	reg     [3]*testkit.Registry
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{cluster: etcdtest.Start(t)}
	var ports [3]int
	var endpoints []string
	for i := range ports {
		ports[i] = testkit.FreePort(t, "udp")
		endpoints = append(endpoints, fmt.Sprintf("127.0.0.1:%d", ports[i]))
	}
	firstKEK := filepath.Join(t.TempDir(), "kek")
	for i := range f.reg {
		dir, kek := t.TempDir(), firstKEK
		if i > 0 {
			kek = filepath.Join(t.TempDir(), "kek")
			copyFile(t, firstKEK, kek)
			copyFile(t, f.reg[0].AdminConfig, filepath.Join(dir, "admin.conf"))
		}
		f.reg[i] = testkit.StartRegistry(t, dir, "--store", "etcd", "--etcd-endpoints", strings.Join(f.cluster.Endpoints, ","),
			"--kek-file", kek, "--agent-listen", endpoints[i], "--agent-endpoints", strings.Join(endpoints, ","))
	}
	return f
}

// copyFile copies from to to, mode 0600.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, to, b, 0o600)
}
