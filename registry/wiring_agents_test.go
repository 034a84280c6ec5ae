package registry

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/registry/userdata"
	"github.com/better-compute/better-compute/registry/workflow"
)

// newRenderer is a user-data renderer with the shipped templates, its secret box in a
// directory of t's.
func newRenderer(t *testing.T) *userdata.Renderer {
	t.Helper()
	box, err := secret.New(secret.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	r, err := userdata.New(userdata.Config{ControlPlaneURL: "https://registry.example:7443", BcdURL: "https://downloads.example/bcd",
		BcdSHA256: strings.Repeat("ab", 32)}, box)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestUserDataGoesOnlyToTheNodesRamdisk checks what the endpoint delivers of a
// deploy.image: the user data it names goes to the ramdisk of its node, and to no other
// agent; the stored command never holds it.
func TestUserDataGoesOnlyToTheNodesRamdisk(t *testing.T) {
	st := storetest.Open(t, store.Options{})
	r := newRenderer(t)
	var ref string
	err := st.Update(func(tx *store.Tx) error {
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

// TestWorkflowTokensNameTheirRun: the join tokens a workflow's steps mint through the
// registry's wiring (boot.prepareRamdisk's and metal.ensureRamdisk's ramdisk token,
// userdata.render's provisioned one) name that run, so that a reuse fails that run and
// no other (metal.Service.TokenReused).
func TestWorkflowTokensNameTheirRun(t *testing.T) {
	st := storetest.Filled(t, store.Options{})
	r := newRenderer(t)
	keys, err := pki.LoadOrCreate(t.TempDir(), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Define([]byte(`{"id": "host", "version": 1, "target": "metal", "image": {"ref": "ubuntu@1"},
		"userData": {"kind": "cloud-init", "template": "bcd-host.yaml.hbs"}, "steps": [{"use": "userdata.render"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	node := store.Node{ID: "nd_1", Site: storetest.Site}
	plane := &agentPlane{st: st, keys: keys, registryURL: "https://registry.example:7443", log: slog.New(slog.DiscardHandler)}
	if err := st.Update(func(tx *store.Tx) error { _, err := plane.Prepare(tx, node, "wf_inspect"); return err }); err != nil {
		t.Fatal(err)
	}
	err = st.Update(func(tx *store.Tx) error { _, err := (renderer{r: r}).Render(tx, node, "wf_deploy", p); return err })
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	st.View(func(tx *store.Tx) error {
		toks, _, err := tx.JoinTokens(store.Page{})
		for _, tok := range toks {
			got[tok.Kind] = tok.Workflow
		}
		return err
	})
	if want := map[string]string{store.TokenRamdisk: "wf_inspect", store.TokenProvisioned: "wf_deploy"}; !maps.Equal(got, want) {
		t.Errorf("the tokens' workflows by kind: %v, want %v", got, want)
	}
}

// TestBootEntryTokenJoinable: the token of a ramdisk boot entry a workflow made
// (agentPlane.Prepare) is one a ramdisk can join with while it is unused and unexpired,
// and once its ramdisk joined; expired unused, or revoked, it fails the step that made
// the entry (INVALID_STATE, reason token-expired or token-invalid), whose next try mints
// another, and reading it changes nothing.
func TestBootEntryTokenJoinable(t *testing.T) {
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	st := storetest.Filled(t, store.Options{Now: func() time.Time { return now }})
	keys, err := pki.LoadOrCreate(t.TempDir(), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	plane := &agentPlane{st: st, keys: keys, registryURL: "https://registry.example:7443", log: slog.New(slog.DiscardHandler)}
	node := store.Node{ID: "nd_1", Site: storetest.Site}
	prepare := func() string {
		var in proto.PrepareRamdisk
		if err := st.Update(func(tx *store.Tx) (err error) { in, err = plane.Prepare(tx, node, "wf_deploy"); return err }); err != nil {
			t.Fatal(err)
		}
		return in.Token
	}
	joinable := func(what, token string, reason string) {
		t.Helper()
		err := plane.Joinable(context.Background(), token)
		if reason == "" && err != nil || reason != "" && (proto.CodeOf(err) != proto.InvalidState || proto.AsError(err).Details.Reason != reason) {
			t.Errorf("%s: %v, want %s", what, err, cmp.Or(reason, "joinable"))
		}
	}
	unused, used, revoked := prepare(), prepare(), prepare()
	joinable("unused", unused, "")
	joinable("unused, read again", unused, "")
	if err := st.Update(func(tx *store.Tx) error { _, err := tx.ConsumeJoinToken(used, ""); return err }); err != nil {
		t.Fatalf("the ramdisk's join with a token read for joinable: %v", err)
	}
	joinable("used by its ramdisk", used, "")
	err = st.Update(func(tx *store.Tx) error {
		tok, err := tx.JoinTokenOf(revoked)
		if err == nil {
			_, err = tx.RevokeJoinToken(tok.ID)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	joinable("revoked", revoked, proto.ReasonTokenInvalid)
	now = now.Add(time.Hour)
	joinable("expired unused", unused, proto.ReasonTokenExpired)
	joinable("expired once its ramdisk joined", used, "")
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
	step("a session at the other replica", there.Joined("nd_1", "node", ""), true)
	step("its end there", there.Left("nd_1", "node", time.Now()), false)
	step("a new session there", there.Joined("nd_1", "node", ""), true)
	step("the other replica stopped", releaseLease(st, thereRun), false)
	step("a join recorded here, no session here", here.Joined("nd_1", "node", ""), false)
}

// TestReturnPlanPerReplica: two replicas on one etcd store (a real three-member cluster)
// stop one after the other and start again: each endpoint starts from the return plan
// its own stop stored (the agents it told, when), not from that of the replica that
// stopped last. A registry alone on its bbolt store starts from its own stop's plan.
func TestReturnPlanPerReplica(t *testing.T) {
	cluster := etcdtest.Start(t)
	sc := StoreConfig{Backend: "etcd", EtcdEndpoints: cluster.Endpoints}
	kek := filepath.Join(t.TempDir(), "kek")
	dirs := []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	start := func(i int) *Registry { return newTestRegistry(t, Config{DataDir: dirs[i], Store: sc, KEKFile: kek}) }
	replicas := []*Registry{start(0)}
	if err := os.Mkdir(dirs[1], 0o700); err != nil {
		t.Fatal(err)
	}
	copyFile(t, replicas[0].Info().AdminConfig, filepath.Join(dirs[1], AdminConfig))
	replicas = append(replicas, start(1))

	stops := make([][2]time.Time, len(replicas))
	for i, r := range replicas {
		stops[i][0] = time.Now()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		stops[i][1] = time.Now()
	}
	for i := range replicas {
		plan := start(i).plane.ep.Return()
		if plan.StoppedAt.Before(stops[i][0]) || plan.StoppedAt.After(stops[i][1]) {
			t.Errorf("replica %d restarted with the plan of a stop at %v, want its own, between %v and %v",
				i, plan.StoppedAt, stops[i][0], stops[i][1])
		}
	}

	dir := t.TempDir()
	alone := newTestRegistry(t, Config{DataDir: dir})
	before := time.Now()
	alone.Close()
	after := time.Now()
	if plan := newTestRegistry(t, Config{DataDir: dir}).plane.ep.Return(); plan.StoppedAt.Before(before) || plan.StoppedAt.After(after) {
		t.Errorf("a bbolt registry restarted with the plan of a stop at %v, want its own, between %v and %v", plan.StoppedAt, before, after)
	}
}

// TestDeployImageDeliveredUnderTheImageSourcesOfNow: a deploy.image is stored while
// the machine's site lets it fetch from mirror.example and cdn.example, and its ramdisk
// gets it only later (it reconnects, or boots again, after the registry stored it). By
// then the platform took a host off the site's image sources (a mirror found
// compromised). The command delivered is held to the site's list as it stands: a
// source the site no longer allows is left out, the site's cache alone offered; with no
// cache copy, the command is answered FORBIDDEN source-not-allowed and never sent; one
// still allowed goes with the site's list of now. Before, it went as it was stored,
// with the mirror and the list of then.
func TestDeployImageDeliveredUnderTheImageSourcesOfNow(t *testing.T) {
	st := storetest.Filled(t, store.Options{})
	node := storetest.Node(t, st, store.Node{MACs: []string{"52:54:00:00:00:01"}})
	then := []string{"mirror.example", "cdn.example"}
	storetest.Update(t, st, func(tx *store.Tx) error { _, err := tx.SetSiteImageSources(storetest.Site, then); return err })
	p := &agentPlane{st: st, userData: newRenderer(t), log: slog.New(slog.DiscardHandler)}
	const cacheURL = "https://rack-a.example:8443/images/sha256/" + "ab?cap=c"
	stored := func(source, cache string) proto.Command {
		payload, _ := json.Marshal(proto.DeployImage{Ref: "os@1", Source: source, ImageSources: &proto.SourceBound{Site: then},
			CacheURL: cache, SHA256: strings.Repeat("ab", 32), Format: "raw", Compression: "zstd"})
		return proto.Command{ID: "wf_1:main.5:a1:image", Kind: proto.CommandDeployImage, Payload: payload}
	}
	// The platform takes the mirror off the site's list.
	now := []string{"cdn.example"}
	storetest.Update(t, st, func(tx *store.Tx) error { _, err := tx.SetSiteImageSources(storetest.Site, now); return err })

	for name, tc := range map[string]struct {
		source, cache string
		// want is the input delivered; code the answer when it is not delivered.
		wantSource string
		wantBound  *proto.SourceBound
		code       proto.Code
	}{
		"a source taken off, not cached": {source: "https://mirror.example/os.raw.zst", code: proto.Forbidden},
		"a source taken off, cached":     {source: "https://mirror.example/os.raw.zst", cache: cacheURL},
		"a source still allowed":         {source: "https://cdn.example/os.raw.zst", wantSource: "https://cdn.example/os.raw.zst", wantBound: &proto.SourceBound{Site: now}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := p.expand(node.ID, proto.RoleRamdisk, stored(tc.source, tc.cache))
			if tc.code != "" {
				if err == nil {
					t.Fatalf("delivered %s: want %s source-not-allowed naming mirror.example:443", got.Payload, tc.code)
				}
				if e := proto.AsError(err); e.Code != tc.code || e.Details.Reason != proto.ReasonSourceNotAllowed || !strings.Contains(e.Message, "mirror.example:443") {
					t.Fatalf("delivered %s, %v: want %s source-not-allowed naming mirror.example:443", got.Payload, err, tc.code)
				}
				if strings.Contains(err.Error(), "cdn.example") {
					t.Errorf("the message shows the tenant the site's image sources: %v", err)
				}
				return
			}
			var in proto.DeployImage
			if err == nil {
				err = json.Unmarshal(got.Payload, &in)
			}
			if err != nil {
				t.Fatal(err)
			}
			bound, _ := json.Marshal(in.ImageSources)
			wantBound, _ := json.Marshal(tc.wantBound)
			if in.Source != tc.wantSource || in.CacheURL != tc.cache || string(bound) != string(wantBound) {
				t.Errorf("delivered source %q within %+v from cache %q, want source %q within %+v", in.Source, in.ImageSources, in.CacheURL, tc.wantSource, tc.wantBound)
			}
		})
	}
}
