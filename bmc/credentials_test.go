package bmc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

func TestCredentialRefCheck(t *testing.T) {
	cases := map[string]struct {
		ref CredentialRef
		ok  bool
	}{
		"secret":             {ref: "secret://rack-1/bmc-admin", ok: true},
		"absolute path":      {ref: "/etc/bcd/bmc/rack-1.json", ok: true},
		"file URL":           {ref: "file:///etc/bcd/bmc/rack-1.json", ok: true},
		"empty":              {ref: ""},
		"relative path":      {ref: "bmc/rack-1.json"},
		"unclean path":       {ref: "/etc/bcd/../shadow"},
		"file URL, relative": {ref: "file://bmc.json"},
		"empty secret":       {ref: "secret://"},
		"secret with a user": {ref: "secret://admin:hunter2@rack-1"},
		"other scheme":       {ref: "vault://rack-1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.ref.Check()
			if tc.ok != (err == nil) {
				t.Fatalf("Check(%q) = %v, want ok %v", tc.ref, err, tc.ok)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error echoes a secret: %v", err)
			}
		})
	}
}

// TestCredentialRedacted: the password never shows through fmt, slog or JSON.
func TestCredentialRedacted(t *testing.T) {
	c := NewCredential("operator", "hunter2")
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("login", "credential", c)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("login", "credential", c)
	js, _ := json.Marshal(c)
	shown := []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s %q", c, c, c, c, c), fmt.Sprint(&c), logged.String(), string(js)}
	for _, s := range shown {
		if strings.Contains(s, "hunter2") {
			t.Errorf("password shown: %s", s)
		}
		if !strings.Contains(s, "operator") {
			t.Errorf("user name not shown: %s", s)
		}
	}
	if c.Password() != "hunter2" {
		t.Fatal("Password() lost the password")
	}
}

func TestFileCredentials(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) CredentialRef {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return CredentialRef(path)
	}
	cases := map[string]struct {
		ref  CredentialRef
		user string
		text string
	}{
		"file":            {ref: write("ok.json", `{"username": "operator", "password": "hunter2"}`, 0o600), user: "operator"},
		"file URL":        {ref: "file://" + write("url.json", `{"username": "operator", "password": "hunter2"}`, 0o400), user: "operator"},
		"readable by all": {ref: write("open.json", `{"username": "operator", "password": "hunter2"}`, 0o644), text: "chmod 600"},
		"unknown field":   {ref: write("extra.json", `{"username": "operator", "password": "x", "token": "y"}`, 0o600), text: "not one JSON object"},
		"no user":         {ref: write("nouser.json", `{"password": "x"}`, 0o600), text: "not one JSON object"},
		"two objects":     {ref: write("two.json", `{"username": "a"} {"username": "b"}`, 0o600), text: "not one JSON object"},
		"missing":         {ref: CredentialRef(filepath.Join(dir, "none.json")), text: "no such file"},
		"secret":          {ref: "secret://rack-1/bmc", text: "secret store"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := FileCredentials{}.Resolve(context.Background(), tc.ref)
			if tc.text == "" {
				if err != nil || c.Username != tc.user || c.Password() != "hunter2" {
					t.Fatalf("got %v, %v; want %s", c, err, tc.user)
				}
				return
			}
			if proto.CodeOf(err) != proto.InvalidConfig || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("got %v, want INVALID_CONFIG containing %q", err, tc.text)
			}
		})
	}
}
