package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/testkit"
)

func TestUserDataPreviewAgainstARealRegistry(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "userdata.json")
	sha := strings.Repeat("5e", 32)
	writeFile(t, cfgFile, `{"controlPlaneUrl": "https://registry.example:7443", "bcdUrl": "https://cache.example/bcd?sig=a%2Fb&exp=1", "bcdSha256": "`+sha+`",
		"templates": {"talos-worker.yaml": "machine:\n  token: {{joinToken}}\n  name: {{hostname}}\n"}}`)
	reg := testkit.StartRegistry(t, "", "--userdata-config", cfgFile)
	admin := reg.AdminConfig

	testkit.JSON(t, admin, nil, "profiles", "create", filepath.Join("..", "examples", "ubuntu-gpu-host.json"))
	ignProfile := filepath.Join(dir, "ign.json")
	writeFile(t, ignProfile, `{"id": "flatcar-host", "version": 2, "target": "metal", "image": {"ref": "flatcar@4230.2"},
		"userData": {"kind": "ignition", "template": "bcd-host.ign"}, "steps": [{"use": "userdata.render"}, {"use": "deploy.deploy"}]}`)
	testkit.JSON(t, admin, nil, "profiles", "create", ignProfile)
	talosProfile := filepath.Join(dir, "talos.json")
	writeFile(t, talosProfile, `{"id": "talos-worker", "version": 1, "target": "metal", "image": {"ref": "talos@1.11.0"},
		"userData": {"kind": "talos", "template": "talos-worker.yaml"}, "steps": [{"use": "userdata.render"}, {"use": "deploy.deploy"}]}`)
	testkit.JSON(t, admin, nil, "profiles", "create", talosProfile)

	res := testkit.CLI(t, admin, "userdata", "preview", "--profile", "ubuntu-24.04-gpu-host", "--node", "gpu_01")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	for _, want := range []string{
		"#cloud-config\nhostname: \"gpu-01\"\n",
		`content: "<join-token>"`,
		`"--server", "https://registry.example:7443"`,
		`"--node-id", "gpu_01"`,
		// Pins left out of the configuration are the registry's own.
		`"--serving-ca-pin", "` + reg.Pins.ServingCA + `"`,
		`"--join-encryption-pin", "` + reg.Pins.JoinEncryption + `"`,
		"curl -fsSL 'https://cache.example/bcd?sig=a%2Fb&exp=1' -o /usr/local/bin/bcd && echo '" + sha + "  /usr/local/bin/bcd' | sha256sum -c -",
	} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("the preview lacks %q:\n%s", want, res.Stdout)
		}
	}

	var ign struct {
		Kind, Template, NodeID, Document string
		Version                          int
	}
	testkit.JSON(t, admin, &ign, "userdata", "preview", "--profile", "flatcar-host", "--node", "gpu_02")
	if ign.Kind != "ignition" || ign.Template != "bcd-host.ign" || ign.Version != 2 || !strings.Contains(ign.Document, `"version": "3.4.0"`) ||
		!strings.Contains(ign.Document, "--node-id gpu_02 --serving-ca-pin "+reg.Pins.ServingCA) {
		t.Errorf("ignition preview %+v", ign)
	}
	res = testkit.CLI(t, admin, "userdata", "preview", "--profile", "talos-worker", "--node", "w_1")
	if res.Code != 0 || res.Stdout != "machine:\n  token: <join-token>\n  name: w-1\n" {
		t.Errorf("talos preview: exit %d\n%q\n%s", res.Code, res.Stdout, res.Stderr)
	}

	var toks struct{ Tokens []any }
	testkit.JSON(t, admin, &toks, "tokens", "list")
	if len(toks.Tokens) != 0 {
		t.Errorf("previews minted tokens: %+v", toks.Tokens)
	}

	forbidden := filepath.Join(dir, "images.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--actions", "compute:images:read", "--out", forbidden)
	for name, tc := range map[string]struct {
		config string
		args   []string
		code   string
		path   string
		exit   int // 1: the registry refuses the call; 2: the command line is wrong, nothing is called
	}{
		"no node":         {admin, []string{"--profile", "flatcar-host"}, "INVALID_INPUT", "--node", 2},
		"no profile":      {admin, []string{"--node", "n1"}, "INVALID_INPUT", "--profile", 2},
		"bad node id":     {admin, []string{"--profile", "flatcar-host", "--node", "N1;reboot"}, "INVALID_INPUT", "nodeId", 1},
		"unknown profile": {admin, []string{"--profile", "nope", "--node", "n1"}, "NOT_FOUND", "id", 1},
		"unknown version": {admin, []string{"--profile", "flatcar-host", "--profile-version", "1", "--node", "n1"}, "NOT_FOUND", "id", 1},
		"no userData":     {admin, []string{"--profile", "metal-enroll", "--node", "n1"}, "INVALID_INPUT", "id", 1},
		"without action":  {forbidden, []string{"--profile", "flatcar-host", "--node", "n1"}, "FORBIDDEN", "", 1},
		"unknown tenant":  {admin, []string{"--tenant", "nobody", "--profile", "flatcar-host", "--node", "n1"}, "NOT_FOUND", "tenantId", 1},
	} {
		t.Run(name, func(t *testing.T) {
			e := testkit.FailsExit(t, tc.exit, tc.config, append([]string{"userdata", "preview"}, tc.args...)...)
			if e.Code != tc.code || e.Details.Path != tc.path {
				t.Errorf("got %+v, want %s at %q", e, tc.code, tc.path)
			}
		})
	}
}

func TestUserDataConfigAtServe(t *testing.T) {
	dir := t.TempDir()
	// A registry started without a user-data configuration cannot render.
	reg := testkit.StartRegistry(t, "")
	testkit.JSON(t, reg.AdminConfig, nil, "profiles", "create", filepath.Join("..", "examples", "ubuntu-gpu-host.json"))
	e := testkit.Fails(t, reg.AdminConfig, "userdata", "preview", "--profile", "ubuntu-24.04-gpu-host", "--node", "n1")
	if e.Code != "INVALID_CONFIG" || e.Details.Path != "userData.controlPlaneUrl" {
		t.Errorf("preview without configuration: %+v", e)
	}
	reg.Stop()

	for name, tc := range map[string]struct {
		file string
		path string
	}{
		"unknown field":      {`{"controlPlaneURL": "https://r.example"}`, "userData.controlPlaneURL"},
		"quote in bcd url":   {`{"bcdUrl": "https://c.example/'$(reboot)'"}`, "userData.bcdUrl"},
		"specifier":          {`{"controlPlaneUrl": "https://r.example/%n"}`, "userData.controlPlaneUrl"},
		"partial pins":       {`{"pins": {"servingCaPin": "sha256/3K9E2rMK5Smf+6KDh2APxc3kv+G9GBpVZQYUQZqcxQc="}}`, "userData.pins.joinSigningPin"},
		"digest":             {`{"bcdSha256": "ABC"}`, "userData.bcdSha256"},
		"template":           {`{"templates": {"t": "{{nope}}"}}`, "userData.templates.t"},
		"shipped name taken": {`{"templates": {"bcd-host.ign": "x"}}`, "userData.templates.bcd-host.ign"},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
			writeFile(t, file, tc.file)
			e := testkit.Fails(t, "", "serve", "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--userdata-config", file)
			if e.Code != "INVALID_CONFIG" || e.Details.Path != tc.path {
				t.Errorf("serve: %+v, want INVALID_CONFIG at %s", e, tc.path)
			}
		})
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
