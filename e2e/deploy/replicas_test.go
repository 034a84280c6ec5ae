package deploy

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

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
	var listen []string
	for range 3 {
		listen = append(listen, fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t, "tcp")))
	}
	udc := userDataConfig(t, "https://"+frontOf(t, listen))
	reg := testkit.StartReplicas(t, cluster.Endpoints, 3, func(i int) []string {
		return []string{"--listen", listen[i], "--userdata-config", udc}
	})
	w.reg = reg[0]
	w.setUp(t, certFile)
	id, m, gate, requested := w.hold(t, "52:54:00:12:39:01", "4c4c4544-0042-3510-8052-b4c04f5959a1")

	started := w.deployHeld(t, id, m, requested)
	reg[0].Kill()
	cluster.Kill(2)
	close(gate)
	w.admin = reg[1].AdminConfig
	// The run waits for its claim to expire (30 s), the agents for their sessions with
	// the killed replica to time out.
	w.resumed(t, id, started.WorkflowID, m, 3*time.Minute)
	if !strings.Contains(reg[1].Stderr.String()+reg[2].Stderr.String(), `msg="workflow ended" workflow=`+started.WorkflowID) {
		t.Errorf("no replica left ended the run")
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
