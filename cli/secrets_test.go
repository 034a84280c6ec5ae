package cli_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/cli"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestSecretsAgainstARealRegistry(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	dir := t.TempDir()
	const value = "abcdef.0123456789abcdef"
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	var put struct {
		TenantID, Ref string
		Replaced      bool
	}
	testkit.JSON(t, admin, &put, "secrets", "put", "--ref", "secret://k8s/prod-join", "--file", file)
	if put.TenantID != "root" || put.Ref != "secret://k8s/prod-join" || put.Replaced {
		t.Errorf("put: %+v", put)
	}
	res := testkit.CLIInput(t, admin, strings.NewReader("ghijkl.0123456789abcdef"), "secrets", "put", "--ref", "secret://k8s/prod-join", "--file", "-", "--format", "json")
	if res.Code != 0 || !strings.Contains(res.Stdout, `"replaced": true`) || strings.Contains(res.Stdout, "ghijkl") {
		t.Errorf("put from stdin: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	testkit.JSON(t, admin, nil, "secrets", "put", "--ref", "secret://bmc/rack-a", "--file", file)

	type listed struct {
		Secrets []struct{ TenantID, Ref string }
	}
	list := func(config string, args ...string) []string {
		t.Helper()
		var l listed
		testkit.JSON(t, config, &l, append([]string{"secrets", "list"}, args...)...)
		var refs []string
		for _, s := range l.Secrets {
			refs = append(refs, s.TenantID+" "+s.Ref)
		}
		return refs
	}
	want := []string{"root secret://bmc/rack-a", "root secret://k8s/prod-join"}
	if diff := cmp.Diff(want, list(admin)); diff != "" {
		t.Errorf("secrets list (-want +got):\n%s", diff)
	}
	if table := testkit.CLI(t, admin, "secrets", "list"); table.Code != 0 || strings.Contains(table.Stdout, "abcdef") || !strings.Contains(table.Stdout, "secret://k8s/prod-join") {
		t.Errorf("secrets list table:\n%s", table.Stdout)
	}

	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 64<<10+1), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	acme := filepath.Join(dir, "acme.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:secrets:manage", "--out", acme)
	reader := filepath.Join(dir, "reader.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--actions", "compute:profiles:read", "--out", reader)
	for name, tc := range map[string]struct {
		config string
		args   []string
		code   string
		path   string
		exit   int // 1: the registry refuses the call; 2: the command line is wrong, nothing is called
	}{
		"no file":                  {admin, []string{"put", "--ref", "secret://k8s/x"}, "INVALID_INPUT", "--file", 2},
		"missing file":             {admin, []string{"put", "--ref", "secret://k8s/x", "--file", filepath.Join(dir, "nope")}, "INVALID_INPUT", "--file", 1},
		"too large":                {admin, []string{"put", "--ref", "secret://k8s/x", "--file", big}, "INVALID_INPUT", "--file", 1},
		"empty":                    {admin, []string{"put", "--ref", "secret://k8s/x", "--file", empty}, "INVALID_INPUT", "value", 1},
		"no ref":                   {admin, []string{"put", "--file", file}, "INVALID_INPUT", "--ref", 2},
		"a plain name":             {admin, []string{"put", "--ref", "k8s/x", "--file", file}, "INVALID_INPUT", "ref", 1},
		"dot dot":                  {admin, []string{"put", "--ref", "secret://k8s/../x", "--file", file}, "INVALID_INPUT", "ref", 1},
		"replace over another's":   {admin, []string{"put", "--ref", "secret://k8s/prod-join", "--file", file, "--tenant", "nobody"}, "NOT_FOUND", "tenantId", 1},
		"acme puts for root":       {acme, []string{"put", "--ref", "secret://k8s/prod-join", "--file", file, "--tenant", "root"}, "NOT_FOUND", "tenantId", 1},
		"acme deletes root's":      {acme, []string{"delete", "--ref", "secret://k8s/prod-join", "--tenant", "root"}, "NOT_FOUND", "tenantId", 1},
		"acme deletes by its name": {acme, []string{"delete", "--ref", "secret://k8s/prod-join"}, "NOT_FOUND", "ref", 1},
		"acme lists root's":        {acme, []string{"list", "--tenant", "root"}, "NOT_FOUND", "tenantId", 1},
		"without the action":       {reader, []string{"put", "--ref", "secret://k8s/x", "--file", file}, "FORBIDDEN", "", 1},
		"delete a bad ref":         {admin, []string{"delete", "--ref", "k8s"}, "INVALID_INPUT", "ref", 1},
		"delete an unknown ref":    {admin, []string{"delete", "--ref", "secret://k8s/unknown"}, "NOT_FOUND", "ref", 1},
	} {
		t.Run(name, func(t *testing.T) {
			e := testkit.FailsExit(t, tc.exit, tc.config, append([]string{"secrets"}, tc.args...)...)
			if e.Code != tc.code || e.Details.Path != tc.path {
				t.Errorf("got %+v, want %s at %q", e, tc.code, tc.path)
			}
			if diff := cmp.Diff(want, list(admin)); diff != "" {
				t.Errorf("a refused command changed the secrets (-want +got):\n%s", diff)
			}
		})
	}
	if got := list(acme); len(got) != 0 {
		t.Errorf("acme sees %q", got)
	}
	testkit.JSON(t, acme, nil, "secrets", "put", "--ref", "secret://k8s/prod-join", "--file", file)
	if diff := cmp.Diff([]string{"acme secret://k8s/prod-join"}, list(acme)); diff != "" {
		t.Errorf("acme's list (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"acme secret://k8s/prod-join"}, list(admin, "--tenant", "acme")); diff != "" {
		t.Errorf("root listing acme's (-want +got):\n%s", diff)
	}

	testkit.JSON(t, admin, nil, "secrets", "delete", "--ref", "secret://bmc/rack-a")
	if diff := cmp.Diff([]string{"root secret://k8s/prod-join"}, list(admin)); diff != "" {
		t.Errorf("after delete (-want +got):\n%s", diff)
	}

	reg.Stop()
	raw, err := os.ReadFile(filepath.Join(reg.DataDir, "registry.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, where := range []string{reg.Stderr.String(), string(raw)} {
		if strings.Contains(where, "abcdef.0123") || strings.Contains(where, "ghijkl") {
			t.Errorf("a secret's value is in the registry's log or store")
		}
	}
}

// TestSecretsPutPromptsOnATerminalOnly: `secrets put --file -` with a terminal on
// standard input says on standard error what to type and that Ctrl-D ends it, and that
// what is typed shows, then stores what was typed; with a pipe on standard input it says
// nothing and stores what the pipe gives. Before, a terminal waited with nothing printed.
func TestSecretsPutPromptsOnATerminalOnly(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	keyboard, terminal := openTerminal(t)
	if _, err := keyboard.Write([]byte("abcdef.0123456789abcdef\n\x04")); err != nil {
		t.Fatal(err)
	}
	res := testkit.CLIInput(t, reg.AdminConfig, terminal, "secrets", "put", "--ref", "secret://k8s/prod-join", "--file", "-")
	if res.Code != 0 || !strings.Contains(res.Stderr, "type the value of secret://k8s/prod-join and end it with Ctrl-D") || !strings.Contains(res.Stderr, "--file FILE keeps the value off it") {
		t.Errorf("put from a terminal: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	res = testkit.CLIInput(t, reg.AdminConfig, strings.NewReader("ghijkl.0123456789abcdef"), "secrets", "put", "--ref", "secret://k8s/prod-join", "--file", "-")
	if res.Code != 0 || !strings.Contains(res.Stdout, "replaced") || res.Stderr != "" {
		t.Errorf("put from a pipe: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}

// openTerminal opens a pseudo-terminal: the side that types into it, and the terminal a
// command reads.
func openTerminal(t *testing.T) (keyboard, terminal *os.File) {
	t.Helper()
	keyboard, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keyboard.Close() })
	if err := unix.IoctlSetPointerInt(int(keyboard.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(keyboard.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	terminal, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { terminal.Close() })
	return keyboard, terminal
}

// TestSecretsPutAsksNoValueItCannotSendAndStopsAtAnInterrupt: `secrets put --file -` on a
// terminal nobody types into. Without a CLI config it is refused INVALID_CONFIG before
// asking for the value; with one, an interrupt while the value is typed ends it, nothing
// stored. Before, the command read the terminal until a Ctrl-D in both, an interrupt
// included, and only then found it had no config.
func TestSecretsPutAsksNoValueItCannotSendAndStopsAtAnInterrupt(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	_, terminal := openTerminal(t)
	start := func(ctx context.Context, config string, stderr *testkit.SyncBuffer) <-chan int {
		done := make(chan int, 1)
		go func() {
			done <- cli.Run(ctx, []string{"secrets", "put", "--ref", "secret://k8s/prod-join", "--file", "-"}, cli.Env{
				Stdin: terminal, Stdout: io.Discard, Stderr: stderr,
				Getenv: func(k string) string { return map[string]string{"BC_CONFIG": config}[k] }})
		}()
		return done
	}
	ended := func(what string, done <-chan int, stderr *testkit.SyncBuffer) int {
		t.Helper()
		select {
		case code := <-done:
			return code
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: still reading the terminal after 30 s:\n%s", what, stderr.String())
			return 0
		}
	}
	var stderr testkit.SyncBuffer
	if code := ended("without a config", start(t.Context(), filepath.Join(t.TempDir(), "none.conf"), &stderr), &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "INVALID_CONFIG") || strings.Contains(stderr.String(), "type the value") {
		t.Errorf("without a config: exit %d\n%s\nwant INVALID_CONFIG before the value is asked for", code, stderr.String())
	}

	var typing testkit.SyncBuffer
	ctx, interrupt := context.WithCancel(t.Context())
	done := start(ctx, reg.AdminConfig, &typing)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(typing.String(), "type the value"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no prompt:\n%s", typing.String())
		}
	}
	interrupt()
	if code := ended("interrupted", done, &typing); code != 1 || !strings.Contains(typing.String(), "nothing sent") {
		t.Errorf("interrupted while the value was typed: exit %d\n%s", code, typing.String())
	}
	var list api.SecretList
	if testkit.JSON(t, reg.AdminConfig, &list, "secrets", "list"); len(list.Secrets) != 0 {
		t.Errorf("an interrupted put stored %+v", list.Secrets)
	}
}
