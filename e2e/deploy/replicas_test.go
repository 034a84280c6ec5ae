package deploy

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/testkit"
)

// TestDeploySurvivesAReplicaKill deploys through the first of three registries on one
// etcd cluster (README, "Running three registries"), and kills that registry with
// SIGKILL, and one etcd member, while the ramdisk streams the image: another replica
// takes the run over once its claim expires, the site agent and the ramdisk move to the
// replicas left, the first boot joins through the control plane address in front of
// them, and the deploy ends as on one registry, deploy.deploy resumed rather than run
// again.
func TestDeploySurvivesAReplicaKill(t *testing.T) {
	w, certFile := newImageWorld(t)
	cluster := etcdtest.Start(t)
	var listen, agents []string
	for range 3 {
		listen = append(listen, fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t, "tcp")))
		agents = append(agents, fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t, "udp")))
	}
	udc := userDataConfig(t, "https://"+frontOf(t, listen))
	firstKEK := filepath.Join(t.TempDir(), "kek")
	var reg [3]*testkit.Registry
	for i := range reg {
		dir, kek := t.TempDir(), firstKEK
		if i > 0 {
			kek = filepath.Join(t.TempDir(), "kek")
			copyFile(t, firstKEK, kek)
			copyFile(t, reg[0].AdminConfig, filepath.Join(dir, "admin.conf"))
		}
		reg[i] = testkit.StartRegistry(t, dir, "--listen", listen[i], "--agent-listen", agents[i], "--userdata-config", udc,
			"--store", "etcd", "--etcd-endpoints", strings.Join(cluster.Endpoints, ","), "--kek-file", kek,
			"--agent-endpoints", strings.Join(agents, ","))
	}
	w.reg = reg[0]
	w.setUp(t, certFile)
	id, m, gate, requested := w.hold(t, "52:54:00:12:39:01", "4c4c4544-0042-3510-8052-b4c04f5959a1")

	var started api.DeployStarted
	testkit.JSON(t, w.admin, &started, "nodes", "deploy", id, "--profile", "e2e-host")
	select {
	case <-requested:
	case <-time.After(time.Minute):
		console, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
		t.Fatalf("the ramdisk never asked for the image; console:\n%s", console)
	}
	reg[0].Kill()
	cluster.Kill(2)
	close(gate)
	w.admin = reg[1].AdminConfig

	var n store.Node
	// The run waits for its claim to expire (30 s), the agents for their sessions with
	// the killed replica to time out.
	ended := waitFor(t, 3*time.Minute, func() bool {
		testkit.JSON(t, w.admin, &n, "nodes", "get", id)
		return n.State != store.NodeDeploying
	})
	var run api.WorkflowView
	testkit.JSON(t, w.admin, &run, "workflows", "get", started.WorkflowID)
	if !ended || n.State != store.NodeActive {
		console, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
		t.Fatalf("node %s, failure %+v\nrun %+v\nconsole:\n%s", n.State, n.Failure, run, console)
	}
	if !strings.Contains(reg[1].Stderr.String()+reg[2].Stderr.String(), `msg="workflow ended" workflow=`+started.WorkflowID) {
		t.Errorf("no replica left ended the run")
	}
	for _, step := range run.Steps {
		if step.Use == "deploy.deploy" && len(step.Attempts) != 1 {
			t.Errorf("deploy.deploy took %d attempts; the replica that took the run over should resume the one", len(step.Attempts))
		}
	}
}

// frontOf listens on loopback and passes each connection to the first of backends that
// answers: the control plane address a load balancer gives replicas.
func frontOf(t *testing.T, backends []string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for _, b := range backends {
					up, err := net.DialTimeout("tcp", b, time.Second)
					if err != nil {
						continue
					}
					defer up.Close()
					go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
					io.Copy(c, up)
					return
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// copyFile copies from to to, mode 0600.
func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, to, b, 0o600)
}
