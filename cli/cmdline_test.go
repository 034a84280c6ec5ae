package cli_test

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// noConfig is a CLI config that does not exist: a command that got as far as calling the
// registry would fail with INVALID_CONFIG (exit 1), so exit 2 shows the command line was
// refused before any call.
const noConfig = "/nonexistent/cli.conf"

// TestMissingFlagIsAUsageError: a command line without a flag or argument the command
// needs is refused before anything is called, exit 2, INVALID_INPUT at that flag or
// argument, with a message naming it; so is a required flag given empty, as a script's
// unset variable gives it. Before, the flags a command checks itself (one it needs in
// one case, such as store check's --data-dir without --store etcd) were refused exit 1,
// as a call that failed, pools update's at "policy", no flag of the command line; and a
// required flag given empty was sent to the registry, refused exit 1 at the API's field.
func TestMissingFlagIsAUsageError(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		path string
	}{
		"pools create without --site":        {[]string{"pools", "create", "gpu"}, "--site"},
		"nodes deploy without --profile":     {[]string{"nodes", "deploy", "nd_1"}, "--profile"},
		"provisioned token without node":     {[]string{"tokens", "create", "--kind", "provisioned"}, "--node-id"},
		"ramdisk token without node":         {[]string{"tokens", "create", "--kind", "ramdisk"}, "--node-id"},
		"site token without site":            {[]string{"tokens", "create", "--kind", "site"}, "--site"},
		"token without kind":                 {[]string{"tokens", "create", "--site", "rack-a"}, "--kind"},
		"profiles validate without anything": {[]string{"profiles", "validate"}, "ID"},
		"profiles validate with both":        {[]string{"profiles", "validate", "p", "--file", "p.json"}, "--file"},
		"credentials create without --out":   {[]string{"credentials", "create", "--actions", "compute:profiles:read"}, "--out"},
		"tenants create without a name":      {[]string{"tenants", "create"}, "NAME"},
		"images get with two":                {[]string{"images", "get", "a", "b"}, "ID|REF"},
		"serve without --data-dir":           {[]string{"serve"}, "--data-dir"},
		"a --ttl that is not whole seconds":  {[]string{"tokens", "create", "--kind", "ramdisk", "--node-id", "n1", "--ttl", "1.5s"}, "--ttl"},
		"--force without --out":              {[]string{"tokens", "create", "--kind", "ramdisk", "--node-id", "n1", "--force"}, "--force"},
		// Flags a command needs in one case of its command line, or given empty.
		"store check without --data-dir":             {[]string{"store", "check"}, "--data-dir"},
		"store copy without --to-etcd-endpoints":     {[]string{"store", "copy", "--from-data-dir", "/var/lib/bc"}, "--to-etcd-endpoints"},
		"pools update without anything":              {[]string{"pools", "update", "gpu"}, "--policy"},
		"serve with an empty --data-dir":             {[]string{"serve", "--data-dir="}, "--data-dir"},
		"secrets put with an empty --file":           {[]string{"secrets", "put", "--ref", "secret://k", "--file="}, "--file"},
		"signers add with an empty --public-key":     {[]string{"signers", "add", "--data-dir", "/var/lib/bc", "--tenant", "root", "--id", "k", "--public-key="}, "--public-key"},
		"userdata preview with an empty --node":      {[]string{"userdata", "preview", "--profile", "p", "--node="}, "--node"},
		"workflows attestation with an empty --step": {[]string{"workflows", "attestation", "wf_1", "--step=", "--out", "d"}, "--step"},
		"nodes deploy with an empty --profile":       {[]string{"nodes", "deploy", "nd_1", "--profile="}, "--profile"},
		"pools create with an empty --site":          {[]string{"pools", "create", "gpu", "--site", ""}, "--site"},
	} {
		t.Run(name, func(t *testing.T) {
			e := testkit.UsageFails(t, noConfig, tc.args...)
			if e.Code != "INVALID_INPUT" || e.Details.Path != tc.path || !strings.Contains(e.Message, tc.path) {
				t.Errorf("%+v, want INVALID_INPUT at %s, naming it", e, tc.path)
			}
			res := testkit.CLI(t, noConfig, tc.args...)
			if res.Code != 2 || !strings.Contains(res.Stderr, "error: INVALID_INPUT: ") || !strings.Contains(res.Stderr, "--help` for its usage") {
				t.Errorf("as a table: exit %d, stderr %q", res.Code, res.Stderr)
			}
		})
	}
}

// TestFileThatIsADirectory: a file argument naming a directory says so, once.
func TestFileThatIsADirectory(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"profiles", "validate", "--file", dir}, {"profiles", "create", dir}} {
		e := testkit.Fails(t, noConfig, args...)
		if e.Code != "INVALID_INPUT" || e.Message != dir+" is a directory: name the file itself" {
			t.Errorf("%v: %+v", args, e)
		}
	}
}

// TestHelp: every way of asking for help exits 0 and shows the command's usage on
// stdout; no command at all, or a group without its command, shows help and exits 2.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"},
		{"help", "serve"}, {"serve", "--help"}, {"serve", "-h"},
		{"profiles", "--help"}, {"help", "profiles"},
		{"help", "profiles", "create"}, {"profiles", "create", "-h"}, {"profiles", "create", "--help", "--tenant", "x"},
		{"completion", "--help"},
	} {
		res := testkit.CLI(t, noConfig, args...)
		want := strings.Join(append([]string{"better-compute"}, filterFlags(args)...), " ")
		if res.Code != 0 || !strings.Contains(res.Stdout, "Usage:\n  "+want) {
			t.Errorf("%v: exit %d, stdout does not show the usage of %q:\n%s%s", args, res.Code, want, res.Stdout, res.Stderr)
		}
	}
	for _, args := range [][]string{nil, {"profiles"}, {"completion"}} {
		res := testkit.CLI(t, noConfig, args...)
		if res.Code != 2 || !strings.Contains(res.Stderr, "Usage:\n") || !strings.Contains(res.Stderr, "Commands:\n") {
			t.Errorf("%v: exit %d, want 2 and the help on stderr:\n%s", args, res.Code, res.Stderr)
		}
	}
}

// filterFlags drops "help" and the flags from a command line, leaving the command's path.
func filterFlags(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		if a != "help" {
			out = append(out, a)
		}
	}
	return out
}

// TestGlobalFlags: --config and --format are taken before the command as after it, listed
// and taken only where they apply (serve and the host-only signers read --data-dir, not a
// CLI config).
func TestGlobalFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "before.conf")
	for _, args := range [][]string{
		{"--config", missing, "tenants", "list"},
		{"tenants", "--config", missing, "list"},
		{"tenants", "list", "--config=" + missing},
	} {
		res := testkit.CLI(t, "", append([]string{"--format", "json"}, args...)...)
		if res.Code != 1 || !strings.Contains(res.Stdout, `"code": "INVALID_CONFIG"`) || !strings.Contains(res.Stdout, missing) {
			t.Errorf("%v: exit %d, want the config it names read (INVALID_CONFIG naming it) and the error as JSON:\n%s%s", args, res.Code, res.Stdout, res.Stderr)
		}
	}
	for _, cmd := range [][]string{{"serve"}, {"signers", "list"}} {
		res := testkit.CLI(t, noConfig, append(cmd, "-h")...)
		if res.Code != 0 || strings.Contains(res.Stdout, "--config") || !strings.Contains(res.Stdout, "--format") {
			t.Errorf("%v -h lists --config, or not --format:\n%s", cmd, res.Stdout)
		}
		e := testkit.UsageFails(t, noConfig, append([]string{"--config", "x.conf"}, append(cmd, "--data-dir", t.TempDir())...)...)
		if e.Details.Path != "--config" || !strings.Contains(e.Message, "--config does not apply to better-compute "+strings.Join(cmd, " ")) {
			t.Errorf("%v --config: %+v", cmd, e)
		}
	}
	if res := testkit.CLI(t, noConfig, "tenants", "list", "-h"); !strings.Contains(res.Stdout, "Global flags:\n      --config FILE") {
		t.Errorf("tenants list -h does not list --config:\n%s", res.Stdout)
	}
	if res := testkit.CLI(t, noConfig, "tenants", "list", "--format", "yaml"); res.Code != 2 || !strings.Contains(res.Stderr, "--format must be table or json") {
		t.Errorf("--format yaml: exit %d, %s", res.Code, res.Stderr)
	}
}

// TestSuggestions: a mistyped command or flag is a usage error (exit 2) that says what
// was meant.
func TestSuggestions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"tenants", "lst"}, `unknown command "lst" for "better-compute tenants"; did you mean "list"?`},
		{[]string{"tenant", "list"}, `unknown command "tenant" for "better-compute"; did you mean "tenants"?`},
		{[]string{"profiles", "valdate", "x"}, `did you mean "validate"?`},
		{[]string{"help", "tenants", "lst"}, `did you mean "list"?`},
		{[]string{"tenants", "list", "--curso", "x"}, `unknown flag: --curso; did you mean "--cursor"?`},
		{[]string{"frobnicate"}, `unknown command "frobnicate" for "better-compute"`},
	} {
		res := testkit.CLI(t, noConfig, tc.args...)
		if res.Code != 2 || !strings.Contains(res.Stderr, tc.says) {
			t.Errorf("%v: exit %d, stderr does not say %q:\n%s", tc.args, res.Code, tc.says, res.Stderr)
		}
	}
}

// TestCompletion: the completion script of each shell, and the completions the script
// asks the binary for.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		res := testkit.CLI(t, noConfig, "completion", shell)
		if res.Code != 0 || !strings.Contains(res.Stdout, "better-compute") || len(res.Stdout) < 1000 {
			t.Errorf("completion %s: exit %d, %d bytes\n%s", shell, res.Code, len(res.Stdout), res.Stderr)
		}
	}
	if res := testkit.CLI(t, noConfig, "completion", "tcsh"); res.Code != 2 {
		t.Errorf("completion tcsh: exit %d, want 2", res.Code)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "tenants", "l"}, []string{"list\t"}},
		{[]string{"__complete", "ten"}, []string{"tenants\t"}},
		{[]string{"__complete", "tokens", "create", "--format", ""}, []string{"table", "json"}},
		{[]string{"__complete", "pools", "create", "gpu", "--"}, []string{"--site\t"}},
	} {
		res := testkit.CLI(t, noConfig, tc.args...)
		for _, w := range tc.want {
			if res.Code != 0 || !strings.Contains(res.Stdout, w) {
				t.Errorf("%v: exit %d, no %q in:\n%s", tc.args, res.Code, w, res.Stdout)
			}
		}
	}
}

// TestStoreCommandsTakeNoConfig: `store check` and `store copy` read a store through
// --data-dir or etcd's flags, never a CLI config, so --config is neither listed in their
// help (nor in docs/commands.md) nor taken: one given is a usage error naming it, as for
// serve. Before, their help listed it and a --config given was silently not read, so an
// operator who meant it to name the registry to check was told of another store.
func TestStoreCommandsTakeNoConfig(t *testing.T) {
	for _, cmd := range [][]string{{"store", "check", "--data-dir", t.TempDir()}, {"store", "copy", "--from-data-dir", t.TempDir(), "--to-etcd-endpoints", "http://127.0.0.1:1"}} {
		res := testkit.CLI(t, noConfig, cmd[0], cmd[1], "-h")
		if res.Code != 0 || strings.Contains(res.Stdout, "--config") || !strings.Contains(res.Stdout, "--format") {
			t.Errorf("%v -h lists --config, or not --format:\n%s", cmd[:2], res.Stdout)
		}
		e := testkit.UsageFails(t, noConfig, append([]string{"--config", "x.conf"}, cmd...)...)
		if e.Details.Path != "--config" || !strings.Contains(e.Message, "--config does not apply to better-compute "+strings.Join(cmd[:2], " ")) {
			t.Errorf("%v --config: %+v", cmd[:2], e)
		}
	}
}

// TestUsageNamesEveryFlag: the usage line of every command (its help's, the command
// table's of docs/commands.md and the README's) names every flag the command takes, so a
// reader of it alone finds them all: tenants list, tokens list and secrets list page 200
// at a time, and their usage lines did not say they take --cursor to go on.
func TestUsageNamesEveryFlag(t *testing.T) {
	for _, h := range commandHelps(t) {
		for name := range h.flags {
			if !regexp.MustCompile(regexp.QuoteMeta(name) + `\b`).MatchString(h.usage) {
				t.Errorf("better-compute %s takes %s, which its usage does not name:\n%s", h.path, name, h.usage)
			}
		}
	}
}

// TestUsageBracketsEveryOptionalFlag: a flag a usage line shows outside brackets is one
// the command cannot go without, refused as a wrong command line (exit 2) when missing;
// every other is in brackets. Before, images register showed --tenant and --compression
// as needed, images promote --tenant, credentials create --tenant (each has a default),
// and credentials create's --actions, shown as needed, was sent to the registry missing
// and refused there, exit 1 at its field actions.
func TestUsageBracketsEveryOptionalFlag(t *testing.T) {
	group := regexp.MustCompile(`\[[^\[\]]*\]|\([^()]*\)`)
	bare := regexp.MustCompile(`--[a-z0-9-]+`)
	for _, h := range commandHelps(t) {
		needed := strings.TrimSuffix(strings.TrimSpace(strings.Join(strings.Fields(h.usage), " ")), " [flags]")
		for group.MatchString(needed) {
			needed = group.ReplaceAllString(needed, "")
		}
		if strings.Contains(needed, "|") {
			continue // alternatives (store check, profiles validate): the command says which it needs
		}
		for _, name := range bare.FindAllString(needed, -1) {
			if !strings.HasSuffix(h.flags[name], "(required)") {
				t.Errorf("better-compute %s shows %s as needed, but takes the command line without it (%q):\n%s", h.path, name, h.flags[name], h.usage)
			}
		}
	}
	e := testkit.UsageFails(t, noConfig, "credentials", "create", "--out", filepath.Join(t.TempDir(), "c.conf"))
	if e.Code != "INVALID_INPUT" || e.Details.Path != "--actions" {
		t.Errorf("credentials create without --actions: %+v, want INVALID_INPUT at --actions, exit 2", e)
	}
}

// commandHelp is what a command's help says: its path, its usage line and the usage of
// each of its flags (but --help).
type commandHelp struct {
	path, usage string
	flags       map[string]string
}

// commandHelps is the help of every command the root's help lists (but completion and
// help), as the binary prints it.
func commandHelps(t *testing.T) []commandHelp {
	t.Helper()
	root := testkit.CLI(t, noConfig, "--help")
	list := root.Stdout[strings.Index(root.Stdout, "Commands:\n")+len("Commands:\n"):]
	list = list[:strings.Index(list, "\n\n")]
	entry := regexp.MustCompile(`^  (\S+(?: \S+)*?)  `)
	flagLine := regexp.MustCompile(`^\s+(?:-\w, )?(--[a-z0-9-]+)(?: \S+)?\s+(.*)$`)
	var out []commandHelp
	for _, line := range strings.Split(list, "\n") {
		m := entry.FindStringSubmatch(line)
		if m == nil || m[1] == "completion" || m[1] == "help" {
			continue
		}
		help := testkit.CLI(t, noConfig, append(strings.Fields(m[1]), "-h")...).Stdout
		h := commandHelp{path: m[1], flags: map[string]string{}}
		h.usage = help[strings.Index(help, "Usage:\n"):]
		h.usage = h.usage[:strings.Index(h.usage, "\n\n")]
		flags := help[strings.Index(help, "Flags:\n")+len("Flags:\n"):]
		flags = flags[:strings.Index(flags+"\n\n", "\n\n")]
		last := ""
		for _, f := range strings.Split(flags, "\n") {
			if n := flagLine.FindStringSubmatch(f); n != nil && strings.HasPrefix(strings.TrimSpace(f), "-") {
				last = n[1]
				h.flags[last] = n[2]
			} else if last != "" {
				h.flags[last] += " " + strings.TrimSpace(f)
			}
		}
		delete(h.flags, "--help")
		out = append(out, h)
	}
	if len(out) < 60 {
		t.Fatalf("read the help of %d commands, want every one:\n%s", len(out), list)
	}
	return out
}

// TestChoiceFlagsAreCheckedAtTheFlag: a flag that takes one of a list of words (a node
// state, a token or image kind, a wipe mode, an image's format or compression) given
// another is a usage error at the flag, naming the words the contract lists, exit 2,
// before any config is read or call made. Before, the value went to the registry, which
// refused it exit 1 at the API's field (state, kind), or took it (wipe).
func TestChoiceFlagsAreCheckedAtTheFlag(t *testing.T) {
	for name, tc := range map[string]struct {
		args    []string
		path    string
		allowed []string
	}{
		"nodes list --state":            {[]string{"nodes", "list", "--state", "enrolled"}, "--state", api.NodeStates()},
		"tokens create --kind":          {[]string{"tokens", "create", "--kind", "root", "--node-id", "n1"}, "--kind", api.TokenKinds()},
		"nodes release --wipe":          {[]string{"nodes", "release", "nd_1", "--wipe", "shred"}, "--wipe", proto.WipeModes},
		"images list --kind":            {[]string{"images", "list", "--kind", "firmware"}, "--kind", []string{"os", "ramdisk"}},
		"images register --kind":        {[]string{"images", "register", "--kind", "OS"}, "--kind", []string{"os", "ramdisk"}},
		"images register --disk-format": {[]string{"images", "register", "--disk-format", "vmdk"}, "--disk-format", []string{"raw", "qcow2", "iso"}},
		"images register --compression": {[]string{"images", "register", "--compression", "xz"}, "--compression", []string{"none", "zstd", "gzip"}},
	} {
		t.Run(name, func(t *testing.T) {
			e := testkit.UsageFails(t, noConfig, tc.args...)
			if e.Code != "INVALID_INPUT" || e.Details.Path != tc.path || !strings.Contains(e.Message, "give one of "+strings.Join(tc.allowed, ", ")) {
				t.Errorf("%+v, want INVALID_INPUT at %s naming %v", e, tc.path, tc.allowed)
			}
		})
	}
}
