package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// TestImagesRegisteredWithoutSize: the specification makes sizeBytes optional. An image
// registered without it, through the CLI (no --size) or the API (no sizeBytes), is
// stored with its size unknown: its JSON has no sizeBytes and `images get` shows
// "unknown". A size given must still be the artifact's: 0 or one past 2^53-1 is
// INVALID_INPUT at sizeBytes; a sign, a leading zero or text is refused at --size before
// any call (exit 2).
func TestImagesRegisteredWithoutSize(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	acme := filepath.Join(t.TempDir(), "acme.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:images:publish,compute:images:read", "--out", acme)
	register := func(ref string, more ...string) []string {
		return append([]string{"images", "register", "--ref", ref, "--source", "https://images.example.com/" + ref + ".raw",
			"--disk-format", "raw", "--sha256", artifactDigest}, more...)
	}

	var cli map[string]any
	testkit.JSON(t, acme, &cli, register("cli@1")...)
	if _, ok := cli["sizeBytes"]; ok || cli["id"] == nil {
		t.Errorf("registered through the CLI without --size: %v, want an image without sizeBytes", cli)
	}
	var api json.RawMessage
	body := map[string]any{"ref": "api@1", "format": "raw", "sha256": artifactDigest, "source": "https://images.example.com/api.raw"}
	if err := testkit.Client(t, acme).Call(context.Background(), "images.register", body, &api); err != nil {
		t.Fatalf("images.register without sizeBytes: %v", err)
	}
	if strings.Contains(string(api), "sizeBytes") {
		t.Errorf("registered through the API without sizeBytes: %s", api)
	}
	res := testkit.CLI(t, acme, "images", "get", "api@1")
	if res.Code != 0 || !strings.Contains(res.Stdout, "size:") || !strings.Contains(res.Stdout, "unknown") {
		t.Errorf("images get api@1: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	var sized map[string]any
	testkit.JSON(t, acme, &sized, register("sized@1", "--size", "1048576")...)
	if sized["sizeBytes"] != float64(1048576) {
		t.Errorf("registered with --size 1048576: %v", sized)
	}
	if res := testkit.CLI(t, acme, "images", "get", "sized@1"); !strings.Contains(res.Stdout, "1048576") {
		t.Errorf("images get sized@1:\n%s", res.Stdout)
	}

	for _, size := range []string{"0", "9007199254740992"} {
		if e := testkit.Fails(t, acme, register("bad@1", "--size", size)...); e.Code != "INVALID_INPUT" || e.Details.Path != "sizeBytes" {
			t.Errorf("--size %s: %+v, want INVALID_INPUT at sizeBytes", size, e)
		}
	}
	for _, size := range []string{"+5", "-1", "010", "0x10", "1_000", "big"} {
		if e := testkit.UsageFails(t, acme, register("bad@1", "--size="+size)...); e.Code != "INVALID_INPUT" || e.Details.Path != "--size" {
			t.Errorf("--size %s: %+v, want INVALID_INPUT at --size", size, e)
		}
	}
	body["ref"], body["sizeBytes"] = "zero@1", 0
	if e := proto.AsError(testkit.Client(t, acme).Call(context.Background(), "images.register", body, nil)); e == nil || e.Code != proto.InvalidInput || e.Details.Path != "sizeBytes" {
		t.Errorf("images.register with sizeBytes 0: %v, want INVALID_INPUT at sizeBytes", e)
	}
	var list struct{ Images []struct{ Ref string } }
	testkit.JSON(t, acme, &list, "images", "list")
	if len(list.Images) != 3 {
		t.Errorf("images %+v: want cli@1, api@1 and sized@1 alone", list.Images)
	}
}
