package registry

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// TestTheLargestHostConfigReachesTheNode: a registry whose store is an etcd cluster of
// the defaults (--max-request-bytes 1.5 MiB) is given, through its API, a profile whose
// hostConfig takes nearly all the 1 MiB a profile may be (a sysctl unit of values of 4
// KiB, the most one may take), and deploys it on a node enrolled through its site
// agent. The deploy succeeds once the installed OS's agent joins, and that agent is
// pushed the NodeSpec with the whole unit over its QUIC session and applies it, as the
// store records. Before, the end of the deploy wrote the host section twice in one
// transaction (2 MB), which etcd refused, and the run stayed running.
func TestTheLargestHostConfigReachesTheNode(t *testing.T) {
	cluster := etcdtest.Start(t)
	f := serveBusy(t, Config{Store: StoreConfig{Backend: "etcd", EtcdEndpoints: cluster.Endpoints}, KEKFile: filepath.Join(t.TempDir(), "kek")})
	f.populate()
	ctx, cancel := context.WithCancel(context.Background())
	var agents sync.WaitGroup
	defer func() { cancel(); agents.Wait() }()
	site := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	agents.Go(func() { site.run(ctx, site.start()) })

	head, tail := `{"id":"large-host","version":1,"target":"metal","hostConfig":{"sysctl":{`, `}},"steps":[{"use":"wait.agentJoined","with":{"role":"node"},"timeout":"5m"}]}`
	var values []string
	for size := len(head) + len(tail); size+4200 < proto.MaxProfileDocument; {
		values = append(values, fmt.Sprintf(`"kernel.pad_%03d":"%s"`, len(values), strings.Repeat("abcd", 1024)))
		size += len(values[len(values)-1]) + 1
	}
	sysctl := "{" + strings.Join(values, ",") + "}"
	c := f.tenants["acme"]
	f.must(c.Call(ctx, "profiles.create", api.CreateProfileRequest{Document: api.Document(head + strings.Join(values, ",") + tail)}, nil), "profiles.create")

	node, err := call[api.Node](c, "metal.enroll", api.EnrollRequest{Pool: "gpu", MACs: []string{"52:54:00:00:0c:01"}, BMC: api.BMC{Driver: "redfish", Address: "https://10.0.0.31"}})
	if !f.must(err, "metal.enroll") {
		t.FailNow()
	}
	f.wait("node "+node.ID+" ready", func() bool {
		n, err := call[api.NodeView](c, "metal.get", api.NodeKey{NodeID: node.ID})
		return err == nil && n.State == store.NodeReady
	})
	started, err := call[api.DeployStarted](c, "metal.deploy", api.DeployRequest{NodeID: node.ID, ProfileID: "large-host"})
	if !f.must(err, "metal.deploy") {
		t.FailNow()
	}
	machine := f.newAgent(node.ID, f.raceJoin(store.TokenProvisioned, node.ID, "node"))
	agents.Go(func() { machine.run(ctx, machine.start()) })
	f.wait("the deploy of the largest host config succeeded", func() bool {
		wf, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: started.WorkflowID})
		return err == nil && wf.State == store.RunSucceeded
	})
	f.wait("the node's agent applies the NodeSpec of the whole sysctl unit", func() bool {
		spec := machine.lastApplied()
		for _, u := range spec.Host {
			if u.Unit == "sysctl" && string(u.Settings) == sysctl {
				return f.observedInStore(node.ID) == spec.Generation
			}
		}
		return false
	})
}
