package agentplane

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/better-compute/better-compute/agent/node"
	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// recorder is the node agent's runner: it records every program line and answers
// kubeadm join --config FILE by keeping the file it reads and writing the kubelet's
// credentials, as kubeadm does.
type recorder struct {
	root    string
	mu      sync.Mutex
	calls   []string
	configs []string
}

func (r *recorder) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, strings.Join(append([]string{name}, args...), " "))
	if name == "kubeadm" && len(args) == 3 && args[0] == "join" && args[1] == "--config" {
		config, err := os.ReadFile(filepath.Join(r.root, args[2]))
		if err != nil {
			return nil, err
		}
		r.configs = append(r.configs, string(config))
		path := filepath.Join(r.root, "etc/kubernetes/kubelet.conf")
		os.MkdirAll(filepath.Dir(path), 0o755)
		return nil, os.WriteFile(path, []byte("clusters:\n- cluster:\n    server: https://10.0.0.1:6443\n"), 0o600)
	}
	return nil, nil
}

func (r *recorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// joinConfigs are the JoinConfigurations kubeadm join was given.
func (r *recorder) joinConfigs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.configs...)
}

// TestNodeAgentGetsItsJoinToken runs `serve` and a node agent that joined with `bcd
// join`: the node's NodeSpec has a k8s-join unit whose tokenRef names a secret its tenant
// put with `secrets put`, and the unit runs kubeadm join with that token, fetched over the
// agent's session. Agents that may not have it are refused over the same wire.
func TestNodeAgentGetsItsJoinToken(t *testing.T) {
	const (
		ref   = "secret://k8s/prod-join"
		token = "abcdef.0123456789abcdef"
		caSum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	)
	dir := t.TempDir()
	reg := testkit.StartRegistry(t, dir)
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a")
	testkit.JSON(t, admin, nil, "tenants", "create", "globex")
	var nodes []string
	for i, tenant := range []string{"root", "globex"} {
		testkit.JSON(t, admin, nil, "pools", "create", "gpu", "--site", "rack-a", "--tenant", tenant)
		var n store.Node
		testkit.JSON(t, admin, &n, "nodes", "enroll", "--pool", "gpu", "--tenant", tenant, "--mac", "52:54:00:12:34:0"+string(rune('1'+i)),
			"--bmc-driver", "qmp", "--bmc-address", "unix:///run/qmp.sock")
		nodes = append(nodes, n.ID)
	}
	tokenFile := filepath.Join(dir, "k8s-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.JSON(t, admin, nil, "secrets", "put", "--ref", ref, "--file", tokenFile)

	// The state a successful deploy leaves: both nodes' host sections hold a k8s-join
	// naming ref, in their NodeSpecs. Written while the registry is stopped (one process
	// opens the store).
	reg.Stop()
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	join := json.RawMessage(`{"server": "https://10.0.0.1:6443", "caCertSha256": "` + caSum + `", "tokenRef": "` + ref + `"}`)
	err = st.Update(func(tx *store.Tx) error {
		for _, id := range nodes {
			n, err := tx.UpdateNode(id, func(n *store.Node) error {
				n.Host = []store.HostUnit{{Unit: "k8s-join", Settings: join}}
				return nil
			})
			if err != nil {
				return err
			}
			if _, err := tx.SetNodeSpec(metal.NodeSpec(n)); err != nil {
				return err
			}
		}
		return nil
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	reg = testkit.StartRegistry(t, dir)

	// The root tenant's node joins and runs bcd node's agent under a root of its own.
	joinToken := filepath.Join(dir, "join-token")
	testkit.JSON(t, admin, nil, "tokens", "create", "--kind", "provisioned", "--node-id", nodes[0], "--out", joinToken)
	confDir := filepath.Join(dir, "bcd")
	if res := testkit.BCD(t, "join", "--server", reg.URL, "--token-file", joinToken, "--node-id", nodes[0], "--config-dir", confDir,
		"--serving-ca-pin", reg.Pins.ServingCA, "--join-signing-pin", reg.Pins.JoinSigning, "--join-encryption-pin", reg.Pins.JoinEncryption); res.Code != 0 {
		t.Fatalf("bcd join: %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	rec := &recorder{root: t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- node.Run(ctx, node.Options{ConfigDir: confDir, Root: rec.root, Runner: rec, Log: testLog(t)})
	}()
	stopNode := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("bcd node: %v", err)
		}
	}
	defer func() {
		if ctx.Err() == nil {
			stopNode()
		}
	}()

	want := `{"apiVersion":"kubeadm.k8s.io/v1beta4","kind":"JoinConfiguration","discovery":{"bootstrapToken":{"apiServerEndpoint":"10.0.0.1:6443","token":"` + token + `","caCertHashes":["sha256:` + caSum + `"]}}}`
	defer func() {
		if t.Failed() {
			t.Logf("registry log:\n%s", reg.Stderr)
		}
	}()
	waitFor(t, "kubeadm join with the token", func() bool {
		return slices.Contains(rec.joinConfigs(), want)
	})
	for _, l := range rec.lines() {
		if strings.Contains(l, token) {
			t.Errorf("the token is on a command line: %s", l)
		}
	}
	var v api.NodeView
	waitFor(t, "the generation applied and reported", func() bool {
		testkit.JSON(t, admin, &v, "nodes", "get", nodes[0])
		return v.Agent != nil && v.Agent.ObservedGeneration == v.Agent.DesiredGeneration && strings.Contains(string(v.Agent.Host), `"changed"`)
	})
	if strings.Contains(string(v.Agent.Host), token) {
		t.Errorf("the host report shows the token: %s", v.Agent.Host)
	}

	// Other agents, with certificates from the registry's agent CA, get nothing.
	agentCA, serving := servePKI(t, reg)
	ask := func(t *testing.T, node string, role proto.Role, ref string) ([]byte, error) {
		cert, err := agentCA.AgentCertificate(node, string(role))
		if err != nil {
			t.Fatal(err)
		}
		a, err := session.New(session.Config{Addr: reg.AgentEndpoint, Certificate: cert, ServerCAs: serving, Log: testLog(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan struct{})
		go func() { a.Run(ctx); close(ran) }()
		defer func() { cancel(); <-ran }()
		return a.Secret(ctx, ref)
	}
	// In this order: the ramdisk's certificate names no run, and is taken while the
	// node's last workflow (its inspection, whose BMC read waits for rack-a's agent)
	// runs; the site agent, last, fails that read and ends the inspection.
	for _, tc := range []struct {
		name string
		node string
		role proto.Role
		ref  string
		code proto.Code
		says string
	}{
		{"another tenant's node naming the same ref", nodes[1], proto.RoleNode, ref, proto.NotFound, "tenant globex has no secret"},
		{"a ref its NodeSpec does not name", nodes[1], proto.RoleNode, "secret://k8s/other", proto.Forbidden, "references no secret"},
		{"a ramdisk agent", nodes[1], proto.RoleRamdisk, ref, proto.Forbidden, "secrets go only to node agents"},
		{"a site agent", "rack-a", proto.RoleSite, ref, proto.Forbidden, "secrets go only to node agents"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value, err := ask(t, tc.node, tc.role, tc.ref)
			if proto.CodeOf(err) != tc.code || value != nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %q, %v; want %s saying %q", value, err, tc.code, tc.says)
			}
		})
	}

	stopNode()
	reg.Stop()
	log := reg.Stderr.String()
	if strings.Contains(log, token) {
		t.Errorf("the registry logged the token")
	}
	if !strings.Contains(log, `msg="agent secret request" node=`+nodes[0]+` role=node ref=`+ref+` code=OK`) {
		t.Errorf("the registry did not log the request it served:\n%s", log)
	}
}
