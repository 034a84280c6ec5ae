package cli_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
)

const artifactDigest = "1b4f0e9851971998e732078544c96b36c3d01cedf7caa332359d6f1d83567014"

// signShell signs an image's signing input exactly as the README shows: printf the
// lines, sign with openssl, base64 -A.
func signShell(t *testing.T, key *openssl.Key, kind, ref, format, compression, digest string) string {
	t.Helper()
	dir := t.TempDir()
	script := `printf 'bc-image-v1\n%s\n%s\n%s\n%s\n%s\n' "$1" "$2" "$3" "$4" "$5" > "$6/input"` + "\n"
	if key.Algorithm == openssl.Ed25519 {
		script += `openssl pkeyutl -sign -rawin -inkey "$7" -in "$6/input" -out "$6/sig"` + "\n"
	} else {
		script += `openssl dgst -sha256 -sign "$7" -out "$6/sig" "$6/input"` + "\n"
	}
	script += `openssl base64 -A -in "$6/sig"`
	out, err := exec.Command("sh", "-c", script, "sh", kind, ref, format, compression, digest, dir, key.PrivatePath).Output()
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return strings.TrimSpace(string(out))
}

type imageOut struct {
	ID, Tenant, Ref, Kind string
	Verified, Public      bool
}

func TestImagesAndSignersAgainstARealRegistry(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	platform := openssl.Generate(t, openssl.Ed25519)
	acmeKey := openssl.Generate(t, openssl.P256)

	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	testkit.JSON(t, admin, nil, "tenants", "create", "beta")
	acme := filepath.Join(t.TempDir(), "acme.conf")
	beta := filepath.Join(t.TempDir(), "beta.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:images:publish,compute:images:read,compute:pools:manage", "--out", acme)
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "beta", "--actions", "compute:images:publish,compute:images:read", "--out", beta)

	// Signers change only on the host, through the admin socket.
	var signer struct{ Tenant, ID, Algorithm, Fingerprint string }
	testkit.JSON(t, admin, &signer, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "root", "--id", "platform-2026", "--public-key", platform.PublicPath)
	if signer.Algorithm != "ed25519" || !strings.HasPrefix(signer.Fingerprint, "sha256/") {
		t.Errorf("added %+v", signer)
	}
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "acme", "--id", "acme-1", "--public-key", acmeKey.PublicPath)
	rsa := openssl.Generate(t, openssl.RSA)
	if e := testkit.Fails(t, admin, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "acme", "--id", "acme-rsa", "--public-key", rsa.PublicPath); e.Code != "INVALID_INPUT" || e.Details.Path != "publicKey" ||
		!strings.Contains(e.Message, "RSA keys are not accepted: use ECDSA P-256 or Ed25519") {
		t.Errorf("rsa signer: %+v", e)
	}
	// A data directory where no registry runs: the message names its socket and the
	// directory, never an internal URL.
	wrong := t.TempDir()
	if res := testkit.CLI(t, admin, "signers", "list", "--data-dir", wrong); res.Code != 1 || strings.Contains(res.Stderr, "http://admin") ||
		!strings.Contains(res.Stderr, filepath.Join(wrong, "admin.sock")) || !strings.Contains(res.Stderr, "--data-dir "+wrong) {
		t.Errorf("signers list --data-dir %s: exit %d\n%s", wrong, res.Code, res.Stderr)
	}
	if e := testkit.UsageFails(t, admin, "signers", "add", "--data-dir", reg.DataDir, "--id", "x", "--public-key", platform.PublicPath); e.Code != "INVALID_INPUT" || e.Details.Path != "--tenant" {
		t.Errorf("signer without tenant: %+v", e)
	}
	// Nothing on the network reaches a host-only method, not even the admin credential.
	err := testkit.Client(t, admin).Call(context.Background(), "signers.add", api.AddSignerRequest{TenantID: "root", ID: "evil", PublicKey: string(platform.PublicPEM)}, nil)
	if proto.CodeOf(err) != proto.Forbidden {
		t.Errorf("signers.add over HTTPS: %v, want FORBIDDEN", err)
	}

	register := func(tenant, ref, kind string, key *openssl.Key, signerID string) []string {
		args := []string{"images", "register", "--tenant", tenant, "--ref", ref, "--kind", kind,
			"--source", "https://images.example.com/" + ref + ".raw.zst", "--disk-format", "raw", "--compression", "zstd",
			"--sha256", artifactDigest, "--size", "3221225472"}
		if key != nil {
			args = append(args, "--signer", signerID, "--signature", signShell(t, key, kind, ref, "raw", "zstd", artifactDigest))
		}
		return args
	}
	var base, own, unsigned, ramdisk imageOut
	testkit.JSON(t, admin, &base, register("root", "ubuntu-24.04-server@2026.09", "os", platform, "platform-2026")...)
	testkit.JSON(t, admin, &ramdisk, register("root", "bc-ramdisk@1", "ramdisk", platform, "platform-2026")...)
	testkit.JSON(t, acme, &own, register("acme", "acme-gpu@1", "os", acmeKey, "acme-1")...)
	testkit.JSON(t, acme, &unsigned, register("acme", "acme-dev@1", "os", nil, "")...)
	if !base.Verified || !ramdisk.Verified || !own.Verified || unsigned.Verified || !strings.HasPrefix(own.ID, "img_") {
		t.Fatalf("registered %+v %+v %+v %+v", base, ramdisk, own, unsigned)
	}
	for name, tc := range map[string]struct {
		args       []string
		code, path string
	}{
		"duplicate ref":        {register("acme", "acme-dev@1", "os", nil, ""), "CONFLICT", "ref"},
		"tenant key, ramdisk":  {register("acme", "acme-rd@1", "ramdisk", acmeKey, "acme-1"), "INVALID_INPUT", "signerId"},
		"unsigned ramdisk":     {register("acme", "acme-rd@1", "ramdisk", nil, ""), "INVALID_INPUT", "signature"},
		"signature of another": {append(register("acme", "acme-x@1", "os", nil, ""), "--signer", "acme-1", "--signature", signShell(t, acmeKey, "os", "acme-y@1", "raw", "zstd", artifactDigest)), "INVALID_INPUT", "signature"},
		"signer alone":         {append(register("acme", "acme-x@1", "os", nil, ""), "--signer", "acme-1"), "INVALID_INPUT", "signature"},
		"short digest":         {append(register("acme", "acme-x@1", "os", nil, ""), "--sha256", "abc"), "INVALID_INPUT", "sha256"},
		"http source":          {append(register("acme", "acme-x@1", "os", nil, ""), "--source", "http://x/y"), "INVALID_INPUT", "source"},
	} {
		t.Run(name, func(t *testing.T) {
			if e := testkit.Fails(t, acme, tc.args...); e.Code != tc.code || e.Details.Path != tc.path {
				t.Errorf("got %+v, want %s at %s", e, tc.code, tc.path)
			}
		})
	}

	// Visibility: beta sees none of acme's images until one is promoted; the unsigned one
	// can never be.
	var list struct{ Images []imageOut }
	testkit.JSON(t, beta, &list, "images", "list")
	if len(list.Images) != 0 {
		t.Errorf("beta lists %+v", list.Images)
	}
	if e := testkit.Fails(t, beta, "images", "get", own.ID); e.Code != "NOT_FOUND" {
		t.Errorf("beta gets acme's image: %+v", e)
	}
	if e := testkit.Fails(t, beta, "images", "promote", own.ID); e.Code != "NOT_FOUND" {
		t.Errorf("beta promotes acme's image: %+v", e)
	}
	if e := testkit.Fails(t, acme, "images", "promote", unsigned.ID, "--tenant", "acme"); e.Code != "INVALID_STATE" || e.Details.Reason != "unsigned" {
		t.Errorf("promoting an unsigned image: %+v", e)
	}
	var promoted imageOut
	testkit.JSON(t, admin, &promoted, "images", "promote", base.ID, "--tenant", "root")
	if !promoted.Public {
		t.Errorf("promoted %+v", promoted)
	}
	testkit.JSON(t, beta, &list, "images", "list")
	if len(list.Images) != 1 || list.Images[0].ID != base.ID {
		t.Errorf("beta after promotion lists %+v", list.Images)
	}
	testkit.JSON(t, acme, &list, "images", "list", "--kind", "os")
	if len(list.Images) != 3 {
		t.Errorf("acme lists %d images, want its 2 and the public one: %+v", len(list.Images), list.Images)
	}
	var got imageOut
	testkit.JSON(t, beta, &got, "images", "get", base.ID)
	if got.Ref != "ubuntu-24.04-server@2026.09" {
		t.Errorf("beta gets %+v", got)
	}
	res := testkit.CLI(t, acme, "images", "list")
	if res.Code != 0 || !strings.Contains(res.Stdout, "acme-gpu@1") || !strings.Contains(res.Stdout, "VERIFIED") {
		t.Errorf("table: %d %s %s", res.Code, res.Stdout, res.Stderr)
	}

	// Revoking: the signer's row stays, its id cannot take another key, new signatures
	// by it are refused.
	testkit.JSON(t, admin, nil, "signers", "revoke", "--data-dir", reg.DataDir, "--tenant", "acme", "--id", "acme-1")
	var signers struct {
		Signers []struct {
			Tenant    string `json:"tenantId"`
			ID        string
			RevokedAt string
		}
	}
	testkit.JSON(t, admin, &signers, "signers", "list", "--data-dir", reg.DataDir, "--tenant", "acme")
	if len(signers.Signers) != 1 || signers.Signers[0].RevokedAt == "" {
		t.Errorf("acme's signers after revoking: %+v", signers)
	}
	if e := testkit.Fails(t, admin, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "acme", "--id", "acme-1", "--public-key", platform.PublicPath); e.Code != "CONFLICT" {
		t.Errorf("re-adding a revoked id with another key: %+v", e)
	}
	if e := testkit.Fails(t, acme, register("acme", "acme-gpu@2", "os", acmeKey, "acme-1")...); e.Code != "INVALID_INPUT" || e.Details.Path != "signerId" {
		t.Errorf("registering with a revoked signer: %+v", e)
	}

	// Sites and pools: the cache plan keeps the verified pre-warm images and says why
	// the others are left out.
	testkit.JSON(t, admin, nil, "sites", "create", "rack-1", "--image-sources", "images.example.com")
	if e := testkit.Fails(t, acme, "sites", "create", "rack-2"); e.Code != "FORBIDDEN" {
		t.Errorf("acme creating a site: %+v", e)
	}
	testkit.JSON(t, acme, nil, "pools", "create", "gpu", "--site", "rack-1", "--prewarm", "ubuntu-24.04-server@2026.09,acme-dev@1")
	if e := testkit.Fails(t, acme, "pools", "create", "cpu", "--site", "rack-1", "--prewarm", "Bad"); e.Code != "INVALID_INPUT" || e.Details.Path != "policy.prewarmImages[0]" {
		t.Errorf("bad pre-warm ref: %+v", e)
	}
	badExtras := filepath.Join(t.TempDir(), "policy.json")
	os.WriteFile(badExtras, []byte(`{"ramdiskExtras":["nvidia-dcgm@1","Bad"]}`), 0o600)
	if e := testkit.Fails(t, acme, "pools", "create", "cpu", "--site", "rack-1", "--policy", badExtras); e.Code != "INVALID_INPUT" || e.Details.Path != "policy.ramdiskExtras[1]" {
		t.Errorf("bad ramdisk extra ref: %+v", e)
	}
	// Extras do not load under Secure Boot: such a pool's machines would wait at each
	// ramdisk boot, the error only in the site's log (before, the pool was made).
	secureExtras := filepath.Join(t.TempDir(), "policy.json")
	os.WriteFile(secureExtras, []byte(`{"secureBoot":true,"ramdiskExtras":["nvidia-dcgm@1"]}`), 0o600)
	if e := testkit.Fails(t, acme, "pools", "create", "cpu", "--site", "rack-1", "--policy", secureExtras); e.Code != "INVALID_INPUT" || e.Details.Path != "policy.ramdiskExtras" {
		t.Errorf("ramdisk extras on a Secure Boot pool: %+v", e)
	}
	testkit.JSON(t, acme, nil, "pools", "update", "gpu", "--prewarm", "ubuntu-24.04-server@2026.09,acme-dev@1,acme-gpu@1,none@1")
	var pool struct {
		Policy struct{ PrewarmImages []string }
	}
	testkit.JSON(t, acme, &pool, "pools", "get", "gpu")
	if len(pool.Policy.PrewarmImages) != 4 {
		t.Errorf("pool %+v", pool)
	}
	var plan struct {
		CacheImages []struct{ Ref, Digest string }
		Excluded    []struct{ Ref, Reason string }
	}
	testkit.JSON(t, admin, &plan, "sites", "cache-plan", "rack-1")
	if len(plan.CacheImages) != 1 || plan.CacheImages[0].Ref != "ubuntu-24.04-server@2026.09" || plan.CacheImages[0].Digest != artifactDigest {
		t.Errorf("cache images %+v", plan.CacheImages)
	}
	reasons := map[string]string{}
	for _, e := range plan.Excluded {
		reasons[e.Ref] = e.Reason
	}
	if reasons["acme-dev@1"] != "unsigned" || reasons["acme-gpu@1"] != "signature" || reasons["none@1"] != "not-found" {
		t.Errorf("left out %+v", plan.Excluded)
	}
	res = testkit.CLI(t, admin, "sites", "cache-plan", "rack-1")
	if res.Code != 0 || !strings.Contains(res.Stdout, "LEFT OUT") {
		t.Errorf("cache plan table: %s %s", res.Stdout, res.Stderr)
	}
	// An OS image, the platform's or acme's own, is never an extra initrd of acme's
	// ramdisk boots, however it is signed.
	extras := filepath.Join(t.TempDir(), "extras.json")
	os.WriteFile(extras, []byte(`{"ramdiskExtras":["ubuntu-24.04-server@2026.09","acme-gpu@1"]}`), 0o600)
	testkit.JSON(t, acme, nil, "pools", "create", "extras", "--site", "rack-1", "--policy", extras)
	var extrasPlan struct {
		Excluded []struct{ Pool, Ref, Reason string }
	}
	testkit.JSON(t, admin, &extrasPlan, "sites", "cache-plan", "rack-1")
	var notRamdisk []string
	for _, e := range extrasPlan.Excluded {
		if e.Pool == "extras" && e.Reason == "not-ramdisk" {
			notRamdisk = append(notRamdisk, e.Ref)
		}
	}
	if len(notRamdisk) != 2 {
		t.Errorf("OS images as extra initrds: left out %+v", extrasPlan.Excluded)
	}
	if res := testkit.CLI(t, acme, "pools", "get", "extras"); !strings.Contains(res.Stdout, "RAMDISK EXTRAS  ubuntu-24.04-server@2026.09,acme-gpu@1") {
		t.Errorf("pools get extras:\n%s", res.Stdout)
	}
	if _, err := os.Stat(filepath.Join(reg.DataDir, "admin.sock")); err != nil {
		t.Errorf("admin socket: %v", err)
	}
}

// A tenant's public image, vouched for only by its own key, is never what another
// tenant's bare ref names, and is not trusted by another tenant under its qualified
// name either, unless that tenant's host puts the key on its allowlist.
func TestAnotherTenantsImageIsNeitherResolvedNorTrusted(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	alphaKey := openssl.Generate(t, openssl.Ed25519)
	alpha := tenantConf(t, admin, "alpha", "compute:images:publish,compute:images:read")
	beta := tenantConf(t, admin, "beta", "compute:images:read,compute:pools:manage")
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "alpha", "--id", "alpha-1", "--public-key", alphaKey.PublicPath)

	var planted imageOut
	testkit.JSON(t, alpha, &planted, "images", "register", "--ref", "os@1", "--source", "https://images.example.com/os-1.raw.zst",
		"--disk-format", "raw", "--compression", "zstd", "--sha256", artifactDigest, "--size", "1048576",
		"--signer", "alpha-1", "--signature", signShell(t, alphaKey, "os", "os@1", "raw", "zstd", artifactDigest))
	testkit.JSON(t, alpha, nil, "images", "promote", planted.ID)

	// Neither beta's nor root's bare ref reaches it; the qualified one does.
	for name, caller := range map[string]string{"beta": beta, "root": admin} {
		if e := testkit.Fails(t, caller, "images", "get", "os@1"); e.Code != "NOT_FOUND" || e.Details.Path != "ref" {
			t.Errorf("%s: images get os@1: %+v, want NOT_FOUND at ref", name, e)
		}
		var got imageOut
		testkit.JSON(t, caller, &got, "images", "get", "alpha/os@1")
		if got.ID != planted.ID {
			t.Errorf("%s: alpha/os@1 is %+v", name, got)
		}
	}
	if e := testkit.Fails(t, beta, "images", "get", "Alpha/os@1"); e.Code != "INVALID_INPUT" || e.Details.Path != "ref" {
		t.Errorf("a malformed owner: %+v", e)
	}
	for _, req := range []api.GetImageRequest{{}, {ID: planted.ID, Ref: "alpha/os@1"}} {
		err := testkit.Client(t, beta).Call(context.Background(), "images.get", req, nil)
		if e := proto.AsError(err); err == nil || e.Code != proto.InvalidInput || e.Details.Path != "id" {
			t.Errorf("images.get of %+v: %v, want INVALID_INPUT at id", req, err)
		}
	}

	// beta's pool pre-warms both spellings: neither is pulled, and the plan says why.
	testkit.JSON(t, admin, nil, "sites", "create", "rack-1", "--image-sources", "images.example.com")
	testkit.JSON(t, beta, nil, "pools", "create", "gpu", "--site", "rack-1", "--prewarm", "os@1,alpha/os@1")
	var plan struct {
		CacheImages []struct{ Ref, Digest string }
		Excluded    []struct{ Ref, Reason, Message string }
	}
	testkit.JSON(t, admin, &plan, "sites", "cache-plan", "rack-1")
	reasons := map[string]string{}
	for _, e := range plan.Excluded {
		reasons[e.Ref] = e.Reason
	}
	if len(plan.CacheImages) != 0 || reasons["os@1"] != "not-found" || reasons["alpha/os@1"] != "untrusted-signer" {
		t.Fatalf("beta's cache plan: %+v", plan)
	}
	for _, e := range plan.Excluded {
		if e.Reason == "untrusted-signer" && !strings.Contains(e.Message, `signer "alpha-1" of tenant alpha`) {
			t.Errorf("the refusal does not say which signer would be needed: %s", e.Message)
		}
	}

	// Once beta's host trusts alpha's key, the qualified ref is pre-warmed; the bare one
	// still names nothing.
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "beta", "--id", "alpha-1", "--public-key", alphaKey.PublicPath)
	testkit.JSON(t, admin, &plan, "sites", "cache-plan", "rack-1")
	if len(plan.CacheImages) != 1 || plan.CacheImages[0].Digest != artifactDigest || len(plan.Excluded) != 1 || plan.Excluded[0].Ref != "os@1" {
		t.Errorf("beta's cache plan once it trusts alpha's key: %+v", plan)
	}
}

// TestHighSSignatures registers images with the high-S twins of real openssl
// signatures: the registry refuses one in either encoding, from any client, saying to
// normalise to low S; `images register` turns the DER openssl writes into its low-S
// twin itself, so the README's signing steps work whatever S openssl picked.
func TestHighSSignatures(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	key := openssl.Generate(t, openssl.P256)
	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	acme := filepath.Join(t.TempDir(), "acme.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:images:publish,compute:images:read", "--out", acme)
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "acme", "--id", "acme-ec", "--public-key", key.PublicPath)

	highOf := func(ref string) []byte {
		der, err := base64.StdEncoding.DecodeString(signShell(t, key, "os", ref, "raw", "zstd", artifactDigest))
		if err != nil {
			t.Fatal(err)
		}
		return openssl.HighS(t, der)
	}
	args := func(ref string, sig []byte) []string {
		return []string{"images", "register", "--tenant", "acme", "--ref", ref, "--source", "https://images.example.com/x.raw.zst",
			"--disk-format", "raw", "--compression", "zstd", "--sha256", artifactDigest, "--size", "1024",
			"--signer", "acme-ec", "--signature", base64.StdEncoding.EncodeToString(sig)}
	}

	// The registry refuses a high S whoever sends it.
	high := highOf("acme-api@1")
	req := api.RegisterImageRequest{TenantID: "acme", Ref: "acme-api@1", Format: proto.FormatRaw,
		Compression: proto.CompressionZstd, SHA256: artifactDigest, SizeBytes: new(int64(1024)), Source: "https://images.example.com/x.raw.zst",
		SignerID: "acme-ec", Signature: base64.StdEncoding.EncodeToString(high)}
	err := testkit.Client(t, acme).Call(context.Background(), "images.register", req, nil)
	if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "signature" || !strings.Contains(e.Message, "low S") {
		t.Errorf("a high-S DER signature through the API: %v, want INVALID_INPUT at signature saying to normalise to low S", err)
	}
	if e := testkit.Fails(t, acme, args("acme-p1363@1", openssl.P1363(t, highOf("acme-p1363@1")))...); e.Code != "INVALID_INPUT" || e.Details.Path != "signature" || !strings.Contains(e.Message, "low S") {
		t.Errorf("a high-S P1363 signature: %+v", e)
	}
	var none struct{ Images []struct{ Ref string } }
	testkit.JSON(t, acme, &none, "images", "list")
	if len(none.Images) != 0 {
		t.Errorf("refused registrations stored %+v", none.Images)
	}

	// The CLI sends the low-S twin of a DER signature.
	high = highOf("acme-cli@1")
	var img struct {
		Verified  bool
		Signature string
	}
	testkit.JSON(t, acme, &img, args("acme-cli@1", high)...)
	stored, _ := base64.StdEncoding.DecodeString(img.Signature)
	if !img.Verified || bytes.Equal(stored, high) || !bytes.Equal(openssl.HighS(t, stored), high) {
		t.Errorf("registered %+v: want verified with the low-S twin of the signature given", img)
	}
}
