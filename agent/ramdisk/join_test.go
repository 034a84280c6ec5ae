package ramdisk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// TestKeptJoinIsOfThisBootsToken: the ramdisk's config dir outlives a boot (a prepared
// ramdisk's, or one that is not a tmpfs), and the machine boots the ramdisk again with
// a new single-use token. The ramdisk joins anew with that token instead of using the
// join the earlier token made; a restart within one boot keeps its own join (its token
// is spent). The dir records which token made the join by its SHA-256, never the token.
// A boot whose join fails forgets the kept join, so no restart of it uses a join of
// another token. Before the ramdisk recorded its token, the second boot kept the first
// boot's certificate.
func TestKeptJoinIsOfThisBootsToken(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	dir := filepath.Join(t.TempDir(), "run-bcd")
	boot := func() Boot {
		t.Helper()
		tokenFile := filepath.Join(t.TempDir(), "token")
		testkit.JSON(t, reg.AdminConfig, nil, "tokens", "create", "--kind", "ramdisk", "--node-id", "gpu-01", "--out", tokenFile)
		token, err := os.ReadFile(tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		return Boot{Registry: reg.URL, Pins: reg.Pins, Token: strings.TrimSpace(string(token)), Node: "gpu-01"}
	}
	join := func(dir string, b Boot) error { return joinRegistry(t.Context(), dir, b, clock.Real{}, nil) }
	cert := func() string {
		t.Helper()
		c, err := os.ReadFile(filepath.Join(dir, bcdconf.CertFile))
		if err != nil {
			t.Fatal(err)
		}
		return string(c)
	}

	first := boot()
	if err := join(dir, first); err != nil {
		t.Fatalf("the first boot's join: %v", err)
	}
	firstCert := cert()
	if err := join(dir, first); err != nil || cert() != firstCert {
		t.Fatalf("bcd ramdisk restarted in the first boot: %v; want its own join kept", err)
	}

	second := boot()
	if err := join(dir, second); err != nil {
		t.Fatalf("the second boot's join: %v", err)
	}
	secondCert := cert()
	if secondCert == firstCert {
		t.Fatal("the ramdisk booted with a new token kept the join the earlier token made")
	}
	if err := join(dir, second); err != nil || cert() != secondCert {
		t.Fatalf("bcd ramdisk restarted in the second boot: %v; want its own join kept", err)
	}
	if _, err := bcdconf.LoadAgent(dir); err != nil {
		t.Fatalf("the kept join: %v", err)
	}
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, token := range []string{first.Token, second.Token} {
			if strings.Contains(string(b), token) {
				t.Errorf("%s holds a join token in the clear", f.Name())
			}
		}
	}

	// The third boot's token was spent elsewhere: its join is refused, and the second
	// boot's join is gone, so a restart in the third boot is refused again.
	third := boot()
	if err := join(t.TempDir(), third); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := join(dir, third); proto.CodeOf(err) != proto.Unauthenticated {
			t.Errorf("a boot whose token is spent: %v, want UNAUTHENTICATED", err)
		}
	}
	if _, err := bcdconf.Load(dir); err == nil {
		t.Error("the join of another token is kept beside the third boot's token")
	}
}
