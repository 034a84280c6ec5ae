package registry

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/registry/userdata"
	"github.com/better-compute/better-compute/registry/workflow"
)

// TestUserDataGoesOnlyToTheNodesRamdisk checks what the endpoint delivers of a
// deploy.image: the user data it names goes to the ramdisk of its node, and to no other
// agent; the stored command never holds it.
func TestUserDataGoesOnlyToTheNodesRamdisk(t *testing.T) {
	st := storetest.Open(t, store.Options{})
	box, err := secret.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := userdata.New(userdata.Config{ControlPlaneURL: "https://registry.example:7443", BcdURL: "https://downloads.example/bcd",
		BcdSHA256: strings.Repeat("ab", 32)}, box)
	if err != nil {
		t.Fatal(err)
	}
	var ref string
	err = st.Update(func(tx *store.Tx) error {
		out, err := r.Render(tx, profile.UserData{Kind: "cloud-init", Template: userdata.CloudInitTemplate}, userdata.Node{ID: "nd_1"})
		ref = out.UserDataRef
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &agentPlane{st: st, userData: r, log: slog.New(slog.DiscardHandler)}
	payload, _ := json.Marshal(proto.DeployImage{Ref: "img@1", UserDataRef: ref, UserDataKind: "cloud-init"})
	cmd := proto.Command{ID: "wf_1:main.5:a1:image", Kind: proto.CommandDeployImage, Payload: payload}

	got, err := p.expand("nd_1", proto.RoleRamdisk, cmd)
	var in proto.DeployImage
	if err == nil {
		err = json.Unmarshal(got.Payload, &in)
	}
	if err != nil || !strings.HasPrefix(string(in.UserData), "#cloud-config") || in.UserDataRef != ref {
		t.Errorf("the node's ramdisk: %v, %q", err, in.UserData)
	}
	if strings.Contains(string(cmd.Payload), "cloud-config") {
		t.Errorf("the stored command holds the document")
	}
	for name, who := range map[string]struct {
		node string
		role proto.Role
	}{
		"the node's installed agent": {"nd_1", proto.RoleNode},
		"another node's ramdisk":     {"nd_2", proto.RoleRamdisk},
		"a site agent":               {"rack-a", proto.RoleSite},
	} {
		if _, err := p.expand(who.node, who.role, cmd); proto.CodeOf(err) != proto.Forbidden {
			t.Errorf("%s: %v, want FORBIDDEN", name, err)
		}
	}
	other := proto.Command{ID: "c1", Kind: "boot.kexec"}
	if got, err := p.expand("nd_2", proto.RoleNode, other); err != nil || got.Kind != other.Kind {
		t.Errorf("another command: %+v %v", got, err)
	}
}

// TestNodeAgentConnectedAtAnotherReplica: remediation's presence counts a node agent
// whose session another replica recorded as connected, though this registry holds no
// session of it, until that replica records the session's end; a join this registry
// recorded without a session here (it ended, or this registry restarted) is not.
func TestNodeAgentConnectedAtAnotherReplica(t *testing.T) {
	st := storetest.Open(t, store.Options{})
	hereRun, thereRun := store.Holder{Replica: "rg_here", Started: time.Now()}, store.Holder{Replica: "rg_there", Started: time.Now()}
	for _, h := range []store.Holder{hereRun, thereRun} {
		if err := takeLease(st, h); err != nil {
			t.Fatal(err)
		}
	}
	here, there := workflow.NewJoinLog(st, hereRun), workflow.NewJoinLog(st, thereRun)
	p := &agentPlane{st: st, ep: &agents.Endpoint{}, joins: here, log: slog.New(slog.DiscardHandler)}
	connected := func() (ok bool) {
		st.View(func(tx *store.Tx) error { ok = p.NodeAgentConnected(tx, "nd_1"); return nil })
		return ok
	}
	step := func(what string, err error, want bool) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if got := connected(); got != want {
			t.Errorf("%s: connected %v, want %v", what, got, want)
		}
	}
	step("no join", nil, false)
	step("a session at the other replica", there.Joined("nd_1", "node"), true)
	step("its end there", there.Left("nd_1", "node", time.Now()), false)
	step("a new session there", there.Joined("nd_1", "node"), true)
	step("the other replica stopped", releaseLease(st, thereRun), false)
	step("a join recorded here, no session here", here.Joined("nd_1", "node"), false)
}
