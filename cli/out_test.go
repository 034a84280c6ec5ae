package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/testkit"
)

// tokenIDs lists the join tokens the registry holds.
func tokenIDs(t *testing.T, admin string) []string {
	t.Helper()
	var out struct{ Tokens []struct{ ID string } }
	testkit.JSON(t, admin, &out, "tokens", "list")
	var ids []string
	for _, tok := range out.Tokens {
		ids = append(ids, tok.ID)
	}
	return ids
}

// TestOutRefusesAnExistingFileUnlessForce: tokens create and credentials create refuse an
// --out file that exists, before anything is made, and leave it as it was; --force
// replaces it whole, mode 0600.
func TestOutRefusesAnExistingFileUnlessForce(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a") // site tokens name a site that exists
	dir := t.TempDir()
	existing := filepath.Join(dir, "kept")
	if err := os.WriteFile(existing, []byte("another credential\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mints := map[string][]string{
		"tokens create":      {"tokens", "create", "--kind", "site", "--site", "rack-a"},
		"credentials create": {"credentials", "create", "--actions", "compute:profiles:read"},
	}
	for name, args := range mints {
		t.Run(name, func(t *testing.T) {
			tokens := len(tokenIDs(t, admin))
			for what, out := range map[string]string{
				"an existing file":    existing,
				"a missing directory": filepath.Join(dir, "missing", "f"),
				"a directory":         dir,
			} {
				e := testkit.Fails(t, admin, append(args, "--out", out)...)
				if e.Code != "INVALID_INPUT" || e.Details.Path != "--out" || !strings.Contains(e.Message, out) || !strings.Contains(e.Message, "nothing was made") {
					t.Errorf("%s: %+v, want INVALID_INPUT at --out naming the file, saying nothing was made", what, e)
				}
			}
			if got, _ := os.ReadFile(existing); string(got) != "another credential\n" {
				t.Errorf("the existing file now holds %q", got)
			}
			if n := len(tokenIDs(t, admin)); n != tokens {
				t.Errorf("refused commands minted tokens: %d, want %d", n, tokens)
			}

			forced := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			os.WriteFile(forced, []byte("old"), 0o644)
			testkit.JSON(t, admin, nil, append(args, "--out", forced, "--force")...)
			st, err := os.Stat(forced)
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("the --force file: %v, mode %v; want 0600", err, st.Mode().Perm())
			}
			if got, _ := os.ReadFile(forced); !strings.Contains(string(got), "bcj_") && !strings.Contains(string(got), `"credential"`) {
				t.Errorf("--force wrote %q", got)
			}
		})
	}
	if left := tempFiles(t, dir); len(left) > 0 {
		t.Errorf("temporary files left beside the --out files: %v", left)
	}
}

// tempFiles is what dir holds besides the files the test made: the temporary files of an
// atomic write that was not finished.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestOutWriteFailureRevokesWhatWasMade runs tokens create and credentials create where
// the --out file passes the check but its bytes cannot be written (a file size limit of
// 0 bytes, `ulimit -f 0`, so the write fails after the registry made the secret): the
// command fails naming the file, leaves no file and no partial one, and the token or
// credential it made is revoked, so no live secret exists that nobody holds.
func TestOutWriteFailureRevokesWhatWasMade(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a") // site tokens name a site that exists
	bin := testkit.Binary(t, "better-compute")
	limited := func(args ...string) (exit int, e testkit.ErrorObject) {
		t.Helper()
		cmd := exec.Command("sh", append([]string{"-c", `ulimit -f 0 && exec "$@"`, "sh", bin}, append(args, "--format", "json")...)...)
		cmd.Env = append(os.Environ(), "BC_CONFIG="+admin)
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); ok {
			exit = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &e); err != nil {
			t.Fatalf("decode %q: %v", out, err)
		}
		return exit, e
	}
	dir := t.TempDir()

	tokens := tokenIDs(t, admin)
	out := filepath.Join(dir, "rack-a.token")
	exit, e := limited("tokens", "create", "--kind", "site", "--site", "rack-a", "--out", out)
	if exit != 1 || e.Code != "INVALID_INPUT" || e.Details.Path != "--out" || !strings.Contains(e.Message, out) || !strings.Contains(e.Message, "revoked again") {
		t.Errorf("tokens create, the write failing: exit %d, %+v; want exit 1, INVALID_INPUT at --out naming the file and saying the token is revoked", exit, e)
	}
	if after := tokenIDs(t, admin); len(after) != len(tokens) {
		t.Errorf("tokens after the failed write: %v, want %v (the minted one revoked)", after, tokens)
	}

	out = filepath.Join(dir, "reader.conf")
	exit, e = limited("credentials", "create", "--actions", "compute:profiles:read", "--out", out)
	if exit != 1 || e.Code != "INVALID_INPUT" || e.Details.Path != "--out" || !strings.Contains(e.Message, out) || !strings.Contains(e.Message, "revoked again") {
		t.Errorf("credentials create, the write failing: exit %d, %+v; want exit 1, INVALID_INPUT at --out naming the file and saying the credential is revoked", exit, e)
	}
	var creds struct {
		Credentials []struct {
			ID        string
			Actions   []string
			RevokedAt string
		}
	}
	testkit.JSON(t, admin, &creds, "credentials", "list")
	for _, c := range creds.Credentials {
		if strings.Join(c.Actions, ",") == "compute:profiles:read" && c.RevokedAt == "" {
			t.Errorf("credential %s, made for the file that could not be written, is not revoked", c.ID)
		}
	}

	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("the failed writes left %d entries in the directory (a partial or temporary file)", len(entries))
	}
}

// TestTokensRevoke: an unused token is revoked and gone; another tenant's credential,
// even holding compute:tokens:manage, and a root credential without that action cannot
// revoke one.
func TestTokensRevoke(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a") // site tokens name a site that exists
	var made struct{ ID string }
	testkit.JSON(t, admin, &made, "tokens", "create", "--kind", "site", "--site", "rack-a")

	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	acme := filepath.Join(t.TempDir(), "acme.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:tokens:manage", "--out", acme)
	if e := testkit.Fails(t, acme, "tokens", "revoke", made.ID); e.Code != "FORBIDDEN" {
		t.Errorf("another tenant revoking a join token: %+v, want FORBIDDEN", e)
	}
	reader := filepath.Join(t.TempDir(), "reader.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--actions", "compute:profiles:read", "--out", reader)
	if e := testkit.Fails(t, reader, "tokens", "revoke", made.ID); e.Code != "FORBIDDEN" {
		t.Errorf("a root credential without compute:tokens:manage revoking a join token: %+v, want FORBIDDEN", e)
	}
	if ids := tokenIDs(t, admin); len(ids) != 1 || ids[0] != made.ID {
		t.Fatalf("tokens after the refused revokes: %v", ids)
	}

	testkit.JSON(t, admin, nil, "tokens", "revoke", made.ID)
	if ids := tokenIDs(t, admin); len(ids) != 0 {
		t.Errorf("tokens after revoking the only one: %v", ids)
	}
	if e := testkit.Fails(t, admin, "tokens", "revoke", made.ID); e.Code != "NOT_FOUND" || e.Details.Path != "id" {
		t.Errorf("revoking it again: %+v, want NOT_FOUND at id", e)
	}
}
