package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/site"
	"github.com/better-compute/better-compute/registry/store"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/wire")

var (
	at    = time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	later = at.Add(90 * time.Minute)
)

// fullNode is a node row with every field set, as the store keeps it.
func fullNode() store.Node {
	failure := &store.StepFailure{RunID: "wf_1", Step: "deploy[2]", Use: "deploy.image", Error: proto.Errorf(proto.Timeout, "the ramdisk did not answer").WithPath("steps[2]")}
	return store.Node{
		ID: "nd_0123456789abcdef", Tenant: "acme", Pool: "gpu", Site: "rack-a",
		MACs: []string{"52:54:00:00:00:01"}, ProductUUID: "4c4c4544-0000-1000-8000-000000000001",
		BMC:         store.BMC{Driver: "redfish", Address: "https://127.0.0.2", CredentialRef: "secret://acme/bmc"},
		PlatformBMC: true, HardwareProfile: "h100", Labels: map[string]string{"rack": "a"},
		DriverOverrides: map[string]store.DriverBinding{"power": {Driver: "redfish", Config: json.RawMessage(`{"reset":"ForceRestart"}`)}},
		Drivers:         map[string]store.DriverBinding{"power": {Driver: "redfish"}, "media": {Driver: "redfish", Config: json.RawMessage(`{"slot":1}`)}},
		State:           "failed", Role: "host",
		Profile:  &store.ProfileRef{Tenant: "builtin", ID: "ubuntu-host", Version: 3},
		Workflow: "wf_1", Transition: "deploy", Next: "commission", FailedFrom: "deploying",
		Failure: failure, UnverifiedWipe: failure,
		MACProposal: &store.MACProposal{MAC: "52:54:00:00:00:02", Site: "rack-a", SeenAt: at},
		BMCMACs:     []string{"52:54:00:00:00:01", "52:54:00:00:00:02"}, BoundMAC: "52:54:00:00:00:01",
		Remediation: &store.Remediation{Profile: store.ProfileRef{Tenant: "builtin", ID: "remediate-reboot", Version: 1}, Workflow: "wf_0", Reason: "xid 79", Automatic: true, At: at},
		Host:        []store.HostUnit{{Unit: "kernel.modules", Settings: json.RawMessage(`{"load":["vfio"]}`)}},
		PoweredAt:   at, IdentityRevokedAt: later, IdentityEpoch: 3, IdentityEpochAt: later,
		AgentsRevoked: &store.Revocation{Epoch: 3, At: later, Reason: "key leaked", By: "cr_1"}, Rev: 7, CreatedAt: at, UpdatedAt: later,
	}
}

func fullSite() store.Site {
	return store.Site{ID: "rack-a", CreatedAt: at, BMCNetworks: []string{"127.0.0.0/8"}, ImageSources: []string{"https://images.example/"},
		IdentityEpoch: 1, AgentRevoked: &store.Revocation{Epoch: 1, At: later, Reason: "server stolen", By: "cr_0"}}
}

// siteWithAgent is a site as sites.list shows it, its agent's session recorded.
func siteWithAgent() Site {
	s := siteOf(fullSite())
	s.Agent = &SiteAgent{ID: "rack-a", Connected: true, Since: at, LastSeen: later}
	return s
}

func inventorySection() store.InventorySection {
	return store.InventorySection{Node: "nd_0123456789abcdef", Section: "gpus", Data: json.RawMessage(`[{"model":"H100"}]`), UpdatedAt: at,
		Refused: &store.InventoryRefusal{At: later, Bytes: 2 << 20}}
}

func renderedStep() profile.RenderedStep {
	fallback := profile.RenderedStep{Phase: "main", Index: 2, Use: "media.insert", On: "site", With: json.RawMessage(`{"image":"rescue@1"}`),
		Timeout: "5m", TimeoutSeconds: 300, Retries: 1, OnFailure: "fail"}
	return profile.RenderedStep{Phase: "main", Index: 2, Use: "deploy.image", On: "ramdisk", With: json.RawMessage(`{"image":"ubuntu@24.04"}`),
		Timeout: "30m", TimeoutSeconds: 1800, Retries: 2, Await: "agent", OnFailure: "fallback", Fallback: &fallback, When: "gpu && rack=a"}
}

func fullPool() store.Pool {
	return store.Pool{Tenant: "acme", Name: "gpu", Site: "rack-a", CreatedAt: at, UpdatedAt: later, Policy: store.PoolPolicy{
		PrewarmImages: []string{"ubuntu@24.04"}, ImageSources: []string{"https://images.example/"}, RamdiskExtras: []string{"nvidia@550"}, SecureBoot: true,
		HardwareProfile: "h100", Agent: "bcd", Enrollment: "commission", TrustProvisioningNetwork: true, RequireGPUs: true,
		Hugepages: json.RawMessage(`{"1G":8}`), KernelModules: json.RawMessage(`["vfio"]`), CPU: json.RawMessage(`{"isolated":"2-7"}`),
		IOMMU: json.RawMessage(`{"mode":"pt"}`), GPU: json.RawMessage(`{"persistence":true}`), Kubernetes: json.RawMessage(`{"join":"x"}`),
		GPUSharing: json.RawMessage(`{"mode":"mps"}`), MIGLayout: json.RawMessage(`{"all":"1g.10gb"}`),
		Remediation:  &store.RemediationPolicy{AgentGoneAfter: "15m", Backoff: "2h"},
		MeasuredBoot: &store.MeasuredBootPolicy{Mode: "golden", PCRs: []int{4}, Golden: map[string]string{"4": "ab" + string(bytes.Repeat([]byte("0"), 62))}},
	}}
}

func fullNodeTPM() store.NodeTPM {
	pcrs := []proto.PCRValue{{Index: 4, Digest: bytes.Repeat([]byte{0xab}, 32)}}
	events := []proto.BootEvent{{PCR: 4, Type: "EV_EFI_BOOT_SERVICES_APPLICATION", Digest: "cd" + string(bytes.Repeat([]byte("0"), 62)), Description: `image \vmlinuz`}}
	return store.NodeTPM{Node: "nd_0123456789abcdef", EKPublic: []byte("ek"), EKCertificate: []byte("cert"), AKPublic: []byte("ak"), AKBlob: []byte("blob"), EnrolledAt: at,
		Baseline: &store.BootBaseline{PCRs: pcrs, Events: events, SetAt: at, AcceptedBy: "cred_1"},
		Last: &proto.AttestBootResult{Mode: "tofu", Verdict: "mismatch", Mismatches: []string{"PCR 4 is ab…"}, VerifiedAt: later,
			Boot: proto.MeasuredBoot{PCRs: pcrs, Events: events, SecureBoot: proto.SecureBootState{Enabled: true, Authorities: []string{"CN=db"}, Problem: "x"}}}}
}

func fullImage() store.Image {
	return store.Image{ID: "im_1", Tenant: "acme", Ref: "ubuntu@24.04", Kind: proto.ImageKind("os"), Format: proto.ImageFormat("qcow2"), Compression: proto.Compression("zstd"),
		SHA256: "ab" + string(bytes.Repeat([]byte("0"), 62)), SizeBytes: 1 << 30, Source: "https://images.example/ubuntu.qcow2.zst",
		SignerID: "release", Signature: "MEUCIQ==", SignerTenant: "builtin", Verified: true, Public: true, CreatedAt: at, PromotedAt: later}
}

func fullSigner() store.ImageSigner {
	return store.ImageSigner{Tenant: "acme", ID: "release", Algorithm: "ecdsa-p256-sha256", PublicKey: "-----BEGIN PUBLIC KEY-----\n", Fingerprint: "sha256:ab",
		AddedAt: at, RevokedAt: later, History: []store.SignerEvent{{Event: "added", At: at}, {Event: "revoked", At: later}}}
}

func fullRunStep() store.RunStep {
	e := proto.Errorf(proto.Unavailable, "the site agent is not connected")
	return store.RunStep{Phase: "steps", Index: 2, Use: "deploy.image", On: "ramdisk", Spec: json.RawMessage(`{"image":"ubuntu@24.04"}`), State: "failed",
		Reason: "timeout", Attempts: []store.Attempt{{Fallback: true, N: 1, CommandID: "cmd_1", Awaiting: true, StartedAt: at, FinishedAt: later, Error: e}},
		ViaFallback: true, Result: json.RawMessage(`{"ok":true}`), Error: e, Progress: json.RawMessage(`{"pct":40}`), StartedAt: at, FinishedAt: later}
}

// usedToken is a join token row with every field set, as the store keeps it once used.
func usedToken() store.JoinToken {
	return store.JoinToken{ID: "5548b4e7516d61bb", Kind: store.TokenProvisioned, NodeID: "nd_0123456789abcdef", Site: "rack-a", SecretHash: "00",
		CreatedAt: at, ExpiresAt: later, UsedAt: later, UsedFrom: "10.0.0.5", Workflow: "wf_1"}
}

// wireAnswers are the answers whose JSON the golden files hold, built from full rows as
// the methods build them.
func wireAnswers() map[string]any {
	n := fullNode()
	return map[string]any{
		"metal.list":   NodeList{Nodes: viewsOf([]store.Node{n}, nodeOf), NextCursor: "bmRfMQ"},
		"metal.get":    NodeView{Node: nodeOf(n), Agent: &NodeAgent{}, Wipe: &NodeWipe{WorkflowID: "wf_1", Step: "wipe", Mode: "quick", Attested: true}, Requests: []string{"retry", "release", "retire"}},
		"metal.enroll": nodeOf(n),
		"metal.retire": TransitionStarted{WorkflowID: "wf_2", Profile: refOf(n.Profile), Node: nodeOf(n)},
		"sites.create": fullSite(),
		"sites.list":   SiteList{Sites: []Site{siteWithAgent()}, NextCursor: "cmFjay1h"},
		"sites.locations": SiteLocations{Locations: viewsOf([]store.ImageLocation{{ImageID: "im_1", SiteLocation: store.SiteLocation{Site: "rack-a", Digest: fullImage().SHA256, Source: fullImage().Source,
			State: proto.ImageCacheState("failed"), SizeBytes: 1 << 30, LastUsed: at, Reason: proto.ReasonSourceNotAllowed, RefusedHost: "cdn.example.com:443", UpdatedAt: later}}}, locationOf), NextCursor: "cmFjay1hAGltXzE"},
		"sites.inventory": SiteInventory{Agent: "site-rack-a", Session: siteWithAgent().Agent, Sections: viewsOf([]store.InventorySection{inventorySection()}, sectionOf)},
		"sites.cachePlan": cachePlanOf(image.CachePlan{Site: "rack-a", CacheImages: []proto.CacheImage{{Ref: "ubuntu@24.04"}}, Excluded: []image.ExcludedImage{{Tenant: "acme", Pool: "gpu", Ref: "old@1", Reason: "unsigned", Message: "old@1 is not signed"}}},
			[]image.FailedImage{{Ref: "ubuntu@24.04", Digest: fullImage().SHA256, Source: fullImage().Source, Reason: proto.ReasonSourceNotAllowed, RefusedHost: "cdn.example.com:443"}}),
		"sites.knownMacs": KnownMACs{Site: "rack-a", Known: 16384, Max: 16384, LeftOutCount: 1,
			LeftOut: viewsOf([]site.LeftOut{{Tenant: "beta", Node: "nd_1", MAC: "52:54:00:00:00:01", Reason: proto.ReasonSiteShare}}, leftOutOf), NextCursor: "bmRfMQ"},
		"metal.attestation": attestationOf(n.ID, fullNodeTPM(), true),
		"metal.inventory":   NodeInventory{NodeID: n.ID, Sections: viewsOf([]store.InventorySection{inventorySection()}, sectionOf)},
		"profiles.render":   Rendering{TenantID: "builtin", ID: "ubuntu-host", Version: 3, Steps: viewsOf([]profile.RenderedStep{renderedStep()}, renderedOf)},
		"profiles.validate": Validation{Valid: false, Issues: viewsOf([]profile.Issue{{Path: "steps[2].timeout", Code: proto.InvalidInput, Message: "timeout \"9x\": use a duration like 10m"}}, issueOf)},
		"pools.get":         fullPool(),
		"pools.list":        PoolList{Pools: viewsOf([]store.Pool{fullPool()}, poolOf)},
		"images.get":        imageOf(fullImage()),
		"images.list":       ImageList{Images: viewsOf([]store.Image{fullImage()}, imageOf)},
		"signers.add":       signerOf(fullSigner()),
		"signers.list":      SignerList{Signers: viewsOf([]store.ImageSigner{fullSigner()}, signerOf)},
		"tokens.list":       TokenList{Tokens: viewsOf([]store.JoinToken{usedToken()}, tokenView), NextCursor: "NTU0OGI0ZTc"},
		"tenants.create":    tenantOf(store.Tenant{ID: "acme", CreatedAt: at}),
		"tenants.list":      TenantList{Tenants: viewsOf([]store.Tenant{{ID: "acme", CreatedAt: at}}, tenantOf)},
		"metal.events": EventList{Events: viewsOf([]store.Event{{Node: n.ID, Tenant: "acme", Seq: 7, At: at, Kind: store.EventStepEnded, Workflow: "wf_1", Step: "steps[2]", Use: "deploy.image",
			To: "failed", Duration: 90 * time.Second, Error: proto.Errorf(proto.Unavailable, "the site agent is not connected"), Detail: "retried"}}, eventOf), NextCursor: "bmRfMQ", LastSeq: 9},
		"workflows.get": WorkflowView{ID: "wf_1", Kind: "deploy", NodeID: n.ID, TenantID: "acme", Profile: ProfileRef(*n.Profile), State: "failed", Steps: viewsOf([]store.RunStep{fullRunStep()}, stepOf), Failure: failureOf(n.Failure), Rev: 4, CreatedAt: at, UpdatedAt: later, FinishedAt: later},
		"credentials.rotateAdmin": RotatedAdmin{Admin: credentialView(store.Credential{ID: "9d5ea5963a15c9d2", Tenant: "root", Actions: []string{ActionAll}, SecretHash: "00", CreatedAt: later}),
			Config: "/var/lib/better-compute/admin.conf", Revoked: []Credential{credentialView(store.Credential{ID: "13e51d2b575ec845", Tenant: "root", Actions: []string{ActionAll}, SecretHash: "00", CreatedAt: at, RevokedAt: later})}},
	}
}

// TestAnswersKeepTheirWire holds the JSON of each answer built from a full row to the
// golden files: the answers' own types decide the wire, whatever the store calls its
// fields.
func TestAnswersKeepTheirWire(t *testing.T) {
	for name, answer := range wireAnswers() {
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(answer, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "wire", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(append(got, '\n'), want) {
				t.Errorf("%s answers\n%s\nwant\n%s", name, got, want)
			}
		})
	}
}
