package site

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// TestMediaInsertFetchesOnlyFromTheSitesImageSources is the attack of tenant acme, with
// its own credential, signer, BMC secret and machines, through the real registry and
// `bcd site`: a media.insert that makes the machine's BMC, on the platform's BMC network,
// fetch from a host inside that network (the link-local metadata address), by a url in
// its profile or the source of its catalog iso, and the machine boots what it got.
// Before, the site agent told the BMC (a simulated Redfish BMC) to mount it. Now the step
// fails FORBIDDEN (source-not-allowed) at the field that named it, and the BMC is never
// asked. The same for a host the site allows and acme's pool leaves out; a url and an iso
// on a host both allow are mounted.
func TestMediaInsertFetchesOnlyFromTheSitesImageSources(t *testing.T) {
	work := t.TempDir()
	reg := testkit.StartRegistry(t, t.TempDir(), "--agent-listen", "127.0.0.1:0")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "127.0.0.1/32", "--image-sources", "isos.example,mirror.example")
	startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache")})

	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	acme := filepath.Join(work, "acme.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--out", acme, "--actions",
		"compute:images:publish,compute:images:read,compute:nodes:manage,compute:nodes:read,compute:pools:manage,compute:profiles:manage,compute:profiles:read,compute:secrets:manage")
	key := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "acme", "--id", "acme-key", "--public-key", key.PublicPath)
	for ref, source := range map[string]string{"rescue@1": "https://isos.example/rescue.iso", "export@1": "https://169.254.169.254/latest/export.iso"} {
		testkit.RegisterImage(t, acme, testkit.Image{Ref: ref, Kind: "os", Source: source, Format: "iso", Compression: "none",
			SHA256: strings.Repeat("ab", 32), Size: 1 << 20, SignerID: "acme-key", Signer: key}, nil)
	}
	testkit.JSON(t, acme, nil, "pools", "create", "own", "--site", "rack-a")
	testkit.JSON(t, acme, nil, "pools", "create", "narrow", "--site", "rack-a", "--policy", writeDoc(t, work, `{"imageSources": ["mirror.example"]}`))
	putSecret(t, acme, work, "secret://bmc/own", `{"username": "acme-admin", "password": "acme-pass"}`)

	cases := []struct {
		name, pool, with string
		path, says       string // the refusal's path and what its message says; mounted when empty
		mounted          string
	}{
		{name: "a url on a host the site does not allow", pool: "own", with: `{"url": "https://169.254.169.254/latest/meta-data/iam.iso"}`,
			path: "with.url", says: "better-compute sites update rack-a --image-sources"},
		{name: "an iso whose source the site does not allow", pool: "own", with: `{"image": "export@1"}`,
			path: "with.image", says: "better-compute sites update rack-a --image-sources"},
		{name: "a url on a host the pool leaves out", pool: "narrow", with: `{"url": "https://isos.example/rescue.iso"}`,
			path: "with.url", says: "pool narrow's policy.imageSources [mirror.example]"},
		{name: "an allowed url", pool: "own", with: `{"url": "https://isos.example/rescue.iso"}`, mounted: "https://isos.example/rescue.iso"},
		{name: "an allowed iso", pool: "own", with: `{"image": "rescue@1"}`, mounted: "https://isos.example/rescue.iso"},
		{name: "a url the pool keeps", pool: "narrow", with: `{"url": "https://mirror.example/rescue.iso"}`, mounted: "https://mirror.example/rescue.iso"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sim := redfishsim.New(redfishsim.Config{Username: "acme-admin", Password: "acme-pass"})
			t.Cleanup(sim.Close)
			pin, err := joinwire.Pin(sim.Certificate.PublicKey)
			if err != nil {
				t.Fatal(err)
			}
			node, err := enroll(t, acme, api.EnrollRequest{Pool: tc.pool, MACs: []string{fmt.Sprintf("52:54:00:77:00:%02x", i)},
				BMC: api.BMC{Driver: "redfish", Address: sim.URL, CredentialRef: "secret://bmc/own"}}, pin)
			if err != nil {
				t.Fatal(err)
			}
			waitNode(t, acme, node.ID, store.NodeReady)
			id := fmt.Sprintf("media-%d", i)
			testkit.JSON(t, acme, nil, "profiles", "create", writeDoc(t, work, fmt.Sprintf(`{"id": %q, "version": 1, "target": "metal",
  "steps": [{"use": "media.insert", "on": "site", "with": %s, "timeout": "1m"}]}`, id, tc.with)))
			res := testkit.CLI(t, acme, "nodes", "deploy", node.ID, "--profile", id, "--wait")
			if tc.mounted != "" {
				if m := sim.Media(); res.Code != 0 || !m.Inserted || m.Image != tc.mounted {
					t.Fatalf("deploy: exit %d, media %+v, want %s mounted\n%s%s", res.Code, m, tc.mounted, res.Stdout, res.Stderr)
				}
				return
			}
			if m := sim.Media(); m.Inserted || m.Image != "" {
				t.Errorf("the BMC was told to mount %+v", m)
			}
			var n store.Node
			testkit.JSON(t, acme, &n, "nodes", "get", node.ID)
			if e := n.Failure; res.Code == 0 || n.State != store.NodeFailed || e == nil || e.Use != proto.CommandMediaInsert || e.Error.Code != proto.Forbidden ||
				e.Error.Details.Reason != proto.ReasonSourceNotAllowed || e.Error.Details.Path != tc.path {
				t.Fatalf("deploy: exit %d, node %s, failure %+v: want media.insert FORBIDDEN source-not-allowed at %s", res.Code, n.State, n.Failure, tc.path)
			}
			for _, want := range []string{"rack-a", tc.says} {
				if !strings.Contains(n.Failure.Error.Message, want) {
					t.Errorf("the refusal does not say %q: %s", want, n.Failure.Error.Message)
				}
			}
		})
	}
}
