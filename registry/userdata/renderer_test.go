package userdata_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/join"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/registry/userdata"
	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

var (
	pins = joinwire.Pins{
		ServingCA:      "sha256/3K9E2rMK5Smf+6KDh2APxc3kv+G9GBpVZQYUQZqcxQc=",
		JoinSigning:    "sha256/ChNRr/2SkMbCvP3THNUYZXc77bGFrcZ5ky5wJSjcpYE=",
		JoinEncryption: "sha256/9nQZM6Vs/u1c+lfUC0WggxOASERT7wGnQezSEinXN10=",
	}
	cloudInit = profile.UserData{Kind: "cloud-init", Template: userdata.CloudInitTemplate}
	ign       = profile.UserData{Kind: "ignition", Template: userdata.IgnitionTemplate}
)

func config() userdata.Config {
	p := pins
	return userdata.Config{
		ControlPlaneURL: "https://registry.example:7443",
		BcdURL:          "https://cache.example/bcd?sig=a%2Fb&exp=1",
		BcdSHA256:       strings.Repeat("ab", 32),
		Pins:            &p,
	}
}

// fixture is a store with a clock the test moves, and a renderer over it.
type fixture struct {
	dataDir string
	st      *store.Store
	r       *userdata.Renderer
	mu      sync.Mutex
	now     time.Time
}

func newFixture(t *testing.T, cfg userdata.Config) *fixture {
	t.Helper()
	fx := &fixture{dataDir: t.TempDir(), now: time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)}
	var err error
	fx.st, err = store.Open(fx.dataDir, store.Options{Now: func() time.Time { fx.mu.Lock(); defer fx.mu.Unlock(); return fx.now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.st.Close() })
	storetest.Fill(t, fx.st) // site rack-a: join tokens name a site that exists
	box, err := secret.New(secret.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	if fx.r, err = userdata.New(cfg, box); err != nil {
		t.Fatal(err)
	}
	return fx
}

func (fx *fixture) advance(d time.Duration) { fx.mu.Lock(); fx.now = fx.now.Add(d); fx.mu.Unlock() }

func (fx *fixture) render(ud profile.UserData, node userdata.Node) (out proto.UserDataRendered, err error) {
	err = fx.st.Update(func(tx *store.Tx) (err error) { out, err = fx.r.Render(tx, ud, node); return err })
	return out, err
}

func (fx *fixture) fetch(ref, nodeID, role string) (doc userdata.Document, err error) {
	err = fx.st.View(func(tx *store.Tx) (err error) { doc, err = fx.r.Fetch(tx, ref, nodeID, role); return err })
	return doc, err
}

func (fx *fixture) consume(secret string) error {
	return fx.st.Update(func(tx *store.Tx) error { _, err := tx.ConsumeJoinToken(secret, ""); return err })
}

func (fx *fixture) tokens(t *testing.T) []store.JoinToken {
	t.Helper()
	var toks []store.JoinToken
	if err := fx.st.View(func(tx *store.Tx) (err error) { toks, _, err = tx.JoinTokens(store.Page{Limit: 200}); return err }); err != nil {
		t.Fatal(err)
	}
	return toks
}

// tokenIn reads the join token out of a rendered document of either kind.
func tokenIn(t *testing.T, doc userdata.Document) string {
	t.Helper()
	switch doc.Kind {
	case "cloud-init":
		var cc struct {
			WriteFiles []struct{ Path, Content string } `yaml:"write_files"`
		}
		if err := yaml.Unmarshal(doc.Data, &cc); err != nil {
			t.Fatal(err)
		}
		return cc.WriteFiles[0].Content
	case "ignition":
		var c struct {
			Storage struct {
				Files []struct {
					Contents struct{ Source string }
				}
			}
		}
		if err := json.Unmarshal(doc.Data, &c); err != nil {
			t.Fatal(err)
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(c.Storage.Files[0].Contents.Source, "data:;base64,"))
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	t.Fatalf("kind %q", doc.Kind)
	return ""
}

func TestRenderMintsSealsAndReturnsOnlyARef(t *testing.T) {
	for name, ud := range map[string]profile.UserData{"cloud-init": cloudInit, "ignition": ign} {
		t.Run(name, func(t *testing.T) {
			fx := newFixture(t, config())
			out, err := fx.render(ud, userdata.Node{ID: "gpu_01", Site: "rack-a", Workflow: "wf_deploy"})
			if err != nil {
				t.Fatal(err)
			}
			if out.Kind != ud.Kind || !strings.HasPrefix(out.UserDataRef, userdata.Purpose+"_") || out.JoinTokenID == "" {
				t.Fatalf("rendered %+v", out)
			}
			toks := fx.tokens(t)
			want := []store.JoinToken{{ID: out.JoinTokenID, Kind: store.TokenProvisioned, NodeID: "gpu_01", Site: "rack-a", CreatedAt: fx.now, ExpiresAt: fx.now.Add(2 * time.Hour), Workflow: "wf_deploy"}}
			if diff := cmp.Diff(want, toks, cmpIgnoreHash); diff != "" {
				t.Errorf("tokens (-want +got):\n%s", diff)
			}
			doc, err := fx.fetch(out.UserDataRef, "gpu_01", joinwire.RoleRamdisk)
			if err != nil {
				t.Fatal(err)
			}
			preview, err := fx.r.Preview(ud, "gpu_01")
			if err != nil {
				t.Fatal(err)
			}
			token := tokenIn(t, doc)
			// As the document writes it: itself in YAML, base64 in an Ignition data URL.
			written := func(s string) []byte {
				if ud.Kind == "ignition" {
					return []byte(base64.StdEncoding.EncodeToString([]byte(s)))
				}
				return []byte(s)
			}
			redacted := bytes.Replace(doc.Data, written(token), written(userdata.RedactedToken), 1)
			if doc.Kind != ud.Kind || !bytes.Equal(redacted, preview) {
				t.Errorf("the fetched document is not the preview with the token:\n%s\n%s", doc.Data, preview)
			}
			if err := fx.consume(token); err != nil {
				t.Errorf("the document's token does not join: %v", err)
			}

			fx.st.Close()
			raw, err := os.ReadFile(filepath.Join(fx.dataDir, store.FileName))
			if err != nil {
				t.Fatal(err)
			}
			secretPart := token[strings.Index(token, ".")+1:]
			for _, plain := range []string{secretPart, base64.StdEncoding.EncodeToString([]byte(token)), "#cloud-config", "bcd-join.service", "sha256sum", pins.ServingCA} {
				if bytes.Contains(raw, []byte(plain)) {
					t.Errorf("the store's file holds %q in plain text", plain)
				}
			}
		})
	}
}

var cmpIgnoreHash = cmp.Transformer("noHash", func(t store.JoinToken) store.JoinToken { t.SecretHash = ""; return t })

func TestFetchOnlyByTheNodesRamdisk(t *testing.T) {
	fx := newFixture(t, config())
	out, err := fx.render(cloudInit, userdata.Node{ID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		ref, node, role string
		code            proto.Code
	}{
		"its ramdisk":           {out.UserDataRef, "n1", joinwire.RoleRamdisk, ""},
		"another node ramdisk":  {out.UserDataRef, "n2", joinwire.RoleRamdisk, proto.Forbidden},
		"the node itself":       {out.UserDataRef, "n1", joinwire.RoleNode, proto.Forbidden},
		"a site agent":          {out.UserDataRef, "n1", joinwire.RoleSite, proto.Forbidden},
		"no role":               {out.UserDataRef, "n1", "", proto.Forbidden},
		"unknown ref":           {"userdata_00", "n1", joinwire.RoleRamdisk, proto.NotFound},
		"unknown ref not ramdk": {"userdata_00", "n1", joinwire.RoleNode, proto.Forbidden},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			doc, err := fx.fetch(tc.ref, tc.node, tc.role)
			if tc.code == "" {
				if err != nil || doc.Kind != "cloud-init" || !bytes.HasPrefix(doc.Data, []byte("#cloud-config\n")) {
					t.Fatalf("fetch: %v, %q", err, doc.Data)
				}
				return
			}
			if proto.CodeOf(err) != tc.code || len(doc.Data) != 0 {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
		})
	}
}

// TestReRenderMintsAnotherToken: a re-run (after a crash) mints a new token and
// replaces the document; the unused token still works once until it expires.
// TestReRenderLeavesOneValidToken renders a node's user data twice in one workflow (a
// step run again), then presents the first document's token at the join service, as
// whoever kept that document would: it is refused, and the second admits the node. The
// token another workflow minted for the node, and one an operator minted, stay.
func TestReRenderLeavesOneValidToken(t *testing.T) {
	fx := newFixture(t, config())
	keys, err := pki.LoadOrCreate(t.TempDir(), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	svc := join.NewService(fx.st, keys, []string{"127.0.0.1:7444"}, slog.New(slog.DiscardHandler))
	joinAs := func(token string) error {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		spki, _ := x509.MarshalPKIXPublicKey(key.Public())
		sealed, err := joinwire.SealToken(keys.JoinEncryptionKey(), joinwire.AAD("n1", joinwire.RoleNode, spki), token)
		if err != nil {
			t.Fatal(err)
		}
		_, err = svc.Join(context.Background(), "192.0.2.7:40000", joinwire.Request{NodeID: "n1", Role: joinwire.RoleNode,
			PublicKey: base64.StdEncoding.EncodeToString(spki), SealedToken: base64.StdEncoding.EncodeToString(sealed)})
		return err
	}
	var kept []store.JoinToken
	storetest.Update(t, fx.st, func(tx *store.Tx) error {
		for _, f := range []store.TokenFor{
			{Kind: store.TokenProvisioned, NodeID: "n1", Workflow: "wf_other"},
			{Kind: store.TokenProvisioned, NodeID: "n1"}, // an operator's
		} {
			tok, _, err := join.MintToken(tx, f, 0)
			if err != nil {
				return err
			}
			kept = append(kept, tok)
		}
		return nil
	})

	node := userdata.Node{ID: "n1", Workflow: "wf_deploy"}
	first, err := fx.render(ign, node)
	if err != nil {
		t.Fatal(err)
	}
	firstDoc, err := fx.fetch(first.UserDataRef, "n1", joinwire.RoleRamdisk)
	if err != nil {
		t.Fatal(err)
	}
	fx.advance(time.Minute)
	second, err := fx.render(ign, node)
	if err != nil {
		t.Fatal(err)
	}
	if second.JoinTokenID == first.JoinTokenID || second.UserDataRef == first.UserDataRef {
		t.Fatalf("the re-render reused %+v: %+v", first, second)
	}
	if _, err := fx.fetch(first.UserDataRef, "n1", joinwire.RoleRamdisk); proto.CodeOf(err) != proto.NotFound {
		t.Errorf("the replaced document: %v, want NOT_FOUND", err)
	}
	secondDoc, err := fx.fetch(second.UserDataRef, "n1", joinwire.RoleRamdisk)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tok := range fx.tokens(t) {
		ids = append(ids, tok.ID)
	}
	slices.Sort(ids)
	want := []string{kept[0].ID, kept[1].ID, second.JoinTokenID}
	slices.Sort(want)
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("tokens after the re-render (-want +got):\n%s", diff)
	}

	fx.advance(time.Minute)
	if err := joinAs(tokenIn(t, firstDoc)); proto.CodeOf(err) != proto.Unauthenticated || proto.AsError(err).Details.Reason != proto.ReasonTokenInvalid {
		t.Fatalf("the first render's token within its lifetime, after the re-render: %v, want UNAUTHENTICATED token-invalid", err)
	}
	if err := joinAs(tokenIn(t, secondDoc)); err != nil {
		t.Fatalf("the second render's token: %v", err)
	}
	fx.advance(2 * time.Hour)
	if err := joinAs(tokenIn(t, secondDoc)); proto.AsError(err).Details.Reason != proto.ReasonTokenUsed {
		t.Fatalf("the second token again: %v", err)
	}
}

func TestRenderRefusals(t *testing.T) {
	talos := profile.UserData{Kind: "talos", Template: "talos-worker.yaml"}
	cases := map[string]struct {
		change func(c *userdata.Config)
		ud     profile.UserData
		node   string
		code   proto.Code
		path   string
	}{
		"no control plane url": {func(c *userdata.Config) { c.ControlPlaneURL = "" }, cloudInit, "n1", proto.InvalidConfig, "userData.controlPlaneUrl"},
		"no bcd url":           {func(c *userdata.Config) { c.BcdURL = "" }, ign, "n1", proto.InvalidConfig, "userData.bcdUrl"},
		"no digest":            {func(c *userdata.Config) { c.BcdSHA256 = "" }, cloudInit, "n1", proto.InvalidConfig, "userData.bcdSha256"},
		"unknown template":     {func(c *userdata.Config) {}, profile.UserData{Kind: "cloud-init", Template: "mine.yaml"}, "n1", proto.InvalidConfig, "userData.template"},
		"talos ships none":     {func(c *userdata.Config) {}, talos, "n1", proto.InvalidConfig, "userData.template"},
		"pins missing in text": {func(c *userdata.Config) { c.Pins = nil; c.Templates = text(t, "pin: {{servingCaPin}}") }, talos, "n1", proto.InvalidConfig, "userData.templates.talos-worker.yaml"},
		"template func fails":  {func(c *userdata.Config) { c.Templates = failing() }, talos, "n1", proto.InvalidConfig, "userData.templates.talos-worker.yaml"},
		"bad node id":          {func(c *userdata.Config) {}, cloudInit, "N1;reboot", proto.InvalidInput, "nodeId"},
		"node id newline":      {func(c *userdata.Config) {}, ign, "n1\nx", proto.InvalidInput, "nodeId"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := config()
			tc.change(&cfg)
			fx := newFixture(t, cfg)
			_, err := fx.render(tc.ud, userdata.Node{ID: tc.node})
			if e := proto.AsError(err); e.Code != tc.code || e.Details.Path != tc.path {
				t.Fatalf("err = %v, want %s at %s", err, tc.code, tc.path)
			}
			if _, err := fx.r.Preview(tc.ud, tc.node); proto.AsError(err).Details.Path != tc.path {
				t.Errorf("preview: %v", err)
			}
			if toks := fx.tokens(t); len(toks) != 0 {
				t.Errorf("a failed render left tokens: %+v", toks)
			}
		})
	}
}

func text(t *testing.T, s string) map[string]userdata.Template {
	t.Helper()
	tmpl, err := userdata.ParseTemplate(s)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]userdata.Template{"talos-worker.yaml": tmpl}
}

func failing() map[string]userdata.Template {
	return map[string]userdata.Template{"talos-worker.yaml": userdata.TemplateFunc(func(userdata.Vars) ([]byte, error) {
		return nil, os.ErrInvalid
	})}
}

func TestCustomTemplatesAndTokenLifetime(t *testing.T) {
	cfg := config()
	cfg.TokenTTLSeconds = 600
	cfg.Templates = text(t, "machine:\n  token: {{joinToken}}\n  name: {{hostname}}\n  pin: {{joinSigningPin}}\n")
	cfg.Templates["go-func"] = userdata.TemplateFunc(func(v userdata.Vars) ([]byte, error) {
		return []byte(v.NodeID + " " + v.BcdURL), nil
	})
	fx := newFixture(t, cfg)
	talos := profile.UserData{Kind: "talos", Template: "talos-worker.yaml"}
	out, err := fx.render(talos, userdata.Node{ID: "gpu_7"})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := fx.fetch(out.UserDataRef, "gpu_7", joinwire.RoleRamdisk)
	if err != nil {
		t.Fatal(err)
	}
	toks := fx.tokens(t)
	if len(toks) != 1 || !toks[0].ExpiresAt.Equal(fx.now.Add(10*time.Minute)) {
		t.Fatalf("tokens %+v", toks)
	}
	want := "machine:\n  token: bcj_" + toks[0].ID + "."
	if doc.Kind != "talos" || !strings.HasPrefix(string(doc.Data), want) || !strings.HasSuffix(string(doc.Data), "\n  name: gpu-7\n  pin: "+pins.JoinSigning+"\n") {
		t.Errorf("rendered %q", doc.Data)
	}
	got, err := fx.r.Preview(profile.UserData{Kind: "talos", Template: "go-func"}, "gpu_7")
	if err != nil || string(got) != "gpu_7 "+cfg.BcdURL {
		t.Errorf("preview of a Go template: %q, %v", got, err)
	}
}

func TestPreviewMintsAndStoresNothing(t *testing.T) {
	fx := newFixture(t, config())
	for _, ud := range []profile.UserData{cloudInit, ign} {
		doc, err := fx.r.Preview(ud, "n1")
		if err != nil {
			t.Fatal(err)
		}
		if token := tokenIn(t, userdata.Document{Kind: ud.Kind, Data: doc}); token != userdata.RedactedToken {
			t.Errorf("%s preview carries the token %q", ud.Kind, token)
		}
	}
	if toks := fx.tokens(t); len(toks) != 0 {
		t.Errorf("preview minted %+v", toks)
	}
}

// TestRenderedDocumentFitsItsDeployImage: the document travels to the ramdisk inside
// the deploy.image command, one agent frame (proto.MaxFrame). A template that renders
// more than MaxDocument is refused when rendering and previewing, INVALID_CONFIG at the
// template, leaving no token; a document of MaxDocument bytes reaches the ramdisk in its
// command even beside long URLs and every image source. Before the bound, the render
// succeeded and the command could never be written: the deploy waited out its hour.
func TestRenderedDocumentFitsItsDeployImage(t *testing.T) {
	cfg := config()
	cfg.BcdURL = "https://cache.example/bcd?sig=" + strings.Repeat("a", 2000)
	urls, err := userdata.ParseTemplate(strings.Repeat("- {{bcdUrl}}\n", 2000)) // 26 KB of text
	if err != nil {
		t.Fatal(err)
	}
	cfg.Templates = map[string]userdata.Template{
		"urls.yaml": urls,
		"big.yaml": userdata.TemplateFunc(func(userdata.Vars) ([]byte, error) {
			return bytes.Repeat([]byte("x"), userdata.MaxDocument+1), nil
		}),
		"largest.yaml": userdata.TemplateFunc(func(v userdata.Vars) ([]byte, error) {
			head := "token: " + v.JoinToken + "\n"
			return append([]byte(head), bytes.Repeat([]byte("x"), userdata.MaxDocument-len(head))...), nil
		}),
	}
	fx := newFixture(t, cfg)
	for _, name := range []string{"urls.yaml", "big.yaml"} {
		ud := profile.UserData{Kind: "cloud-init", Template: name}
		out, err := fx.render(ud, userdata.Node{ID: "n1"})
		if err == nil {
			_, err = fx.deliver(t, out.UserDataRef, "n1")
			t.Fatalf("%s: rendered, and its deploy.image cannot reach the ramdisk: %v", name, err)
		}
		if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != "userData.templates."+name {
			t.Errorf("%s: %v, want INVALID_CONFIG at userData.templates.%s", name, err, name)
		}
		if _, err := fx.r.Preview(ud, "n1"); proto.AsError(err).Details.Path != "userData.templates."+name {
			t.Errorf("%s preview: %v", name, err)
		}
	}
	if toks := fx.tokens(t); len(toks) != 0 {
		t.Errorf("refused renders left tokens: %+v", toks)
	}
	out, err := fx.render(profile.UserData{Kind: "talos", Template: "largest.yaml"}, userdata.Node{ID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := fx.deliver(t, out.UserDataRef, "n1"); err != nil || n != userdata.MaxDocument {
		t.Errorf("a document of MaxDocument bytes: %d bytes delivered, %v", n, err)
	}
}

// deliver completes a deploy.image naming ref as the agent endpoint does for node's
// ramdisk, with URLs and image sources as long as a catalog and a site give them, and
// writes it as an agent frame: it returns the size of the document the command carries.
func (fx *fixture) deliver(t *testing.T, ref, node string) (int, error) {
	t.Helper()
	long := "https://images.example/" + strings.Repeat("p", 2000)
	site := make([]string, proto.MaxImageSources)
	for i := range site {
		site[i] = "*." + strings.Repeat("d", 250) + ".example:65535"
	}
	payload, err := proto.Marshal(proto.DeployImage{Ref: "img@1", Source: long, CacheURL: long, ImageSources: &proto.SourceBound{Site: site, Pool: site},
		SHA256: strings.Repeat("ab", 32), Format: "raw", Compression: "zstd", UserDataRef: ref, UserDataKind: "cloud-init"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := proto.Command{ID: "wf_1:main.5:a1:image", Kind: proto.CommandDeployImage, Payload: payload}
	if err := fx.st.View(func(tx *store.Tx) (err error) { cmd, err = fx.r.Deliver(tx, node, proto.RoleRamdisk, cmd); return err }); err != nil {
		t.Fatal(err)
	}
	var in proto.DeployImage
	if err := json.Unmarshal(cmd.Payload, &in); err != nil {
		t.Fatal(err)
	}
	return len(in.UserData), proto.WriteMessage(io.Discard, &proto.Message{Type: proto.MsgCommand, Command: &cmd})
}

// TestIgnitionCheckedAtRender: a document of kind ignition is checked with Ignition's own
// parser as it is rendered and previewed, and one Ignition would refuse, or would read
// two members of one object as one field, is INVALID_CONFIG at its template naming the
// place in the document, leaving no token. Before, the render succeeded and the ramdisk
// refused the document, or merged bcd's files beside the template's, after it had written
// the whole image.
func TestIgnitionCheckedAtRender(t *testing.T) {
	const file = `{"path":"/etc/motd","contents":{"source":"data:,{{nodeId}}"}}`
	for name, tc := range map[string]struct {
		template, path, want string
	}{
		"a relative path": {
			template: `{"ignition":{"version":"3.4.0"},"storage":{"files":[` + file + `,{"path":"etc/x"}]}}`,
			path:     "userData.templates.mine.ign", want: "storage.files[1].path: path not absolute",
		},
		"not spec 3": {
			template: `{"ignition":{"version":"2.3.0"}}`,
			path:     "userData.templates.mine.ign", want: "unsupported config version",
		},
		"not JSON": {
			template: "#cloud-config\nhostname: {{hostname}}\n",
			path:     "userData.templates.mine.ign", want: "Ignition refuses",
		},
		"storage in two cases": {
			template: `{"ignition":{"version":"3.4.0"},"Storage":{"files":[` + file + `]},"storage":{"directories":[{"path":"/srv"}]}}`,
			path:     "userData.templates.mine.ign", want: `at storage: "Storage" and "storage" are one field`,
		},
		"files in two cases": {
			template: `{"ignition":{"version":"3.4.0"},"storage":{"files":[` + file + `],"FILES":[]}}`,
			path:     "userData.templates.mine.ign", want: `at storage.FILES: "files" and "FILES"`,
		},
		"storage twice": {
			template: `{"ignition":{"version":"3.4.0"},"storage":{"files":[` + file + `]},"storage":{}}`,
			path:     "userData.templates.mine.ign", want: `at storage: duplicate field "storage"`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := config()
			ud := profile.UserData{Kind: "ignition", Template: "mine.ign"}
			tmpl, err := userdata.ParseTemplate(tc.template)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Templates = map[string]userdata.Template{"mine.ign": tmpl}
			fx := newFixture(t, cfg)
			_, err = fx.render(ud, userdata.Node{ID: "n1"})
			if err == nil {
				t.Fatalf("rendered, want INVALID_CONFIG at %s saying %q", tc.path, tc.want)
			}
			if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != tc.path || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("render: %v (at %q), want INVALID_CONFIG at %s saying %q", err, e.Details.Path, tc.path, tc.want)
			}
			if _, err := fx.r.Preview(ud, "n1"); err == nil || proto.AsError(err).Details.Path != tc.path {
				t.Errorf("preview: %v, want refused at %s", err, tc.path)
			}
			if toks := fx.tokens(t); len(toks) != 0 {
				t.Errorf("a refused render left tokens: %+v", toks)
			}
		})
	}
	t.Run("a valid template renders and previews", func(t *testing.T) {
		cfg := config()
		tmpl, err := userdata.ParseTemplate(`{"ignition":{"version":"3.4.0"},"storage":{"files":[` + file + `,{"path":"/etc/bcd/join-token","mode":384,"contents":{"source":"data:,{{joinToken}}"}}]}}`)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Templates = map[string]userdata.Template{"mine.ign": tmpl}
		fx := newFixture(t, cfg)
		ud := profile.UserData{Kind: "ignition", Template: "mine.ign"}
		if _, err := fx.render(ud, userdata.Node{ID: "n1"}); err != nil {
			t.Errorf("render: %v", err)
		}
		if _, err := fx.r.Preview(ud, "n1"); err != nil {
			t.Errorf("preview: %v", err)
		}
	})
}
