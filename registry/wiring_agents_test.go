package registry

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/registry/userdata"
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
