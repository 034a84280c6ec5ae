package bmc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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
		"absolute path":      {ref: "/etc/bcd/bmc/rack-1.json"},
		"file URL":           {ref: "file:///etc/bcd/bmc/rack-1.json"},
		"dot-dot":            {ref: "secret://rack-1/../shadow"},
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

// TestAttached: a command's credential answers its own reference only.
func TestAttached(t *testing.T) {
	a := Attached{Ref: "secret://rack-1/bmc", Credential: NewCredential("operator", "hunter2")}
	c, err := a.Resolve(context.Background(), "secret://rack-1/bmc")
	if err != nil || c.Username != "operator" || c.Password() != "hunter2" {
		t.Fatalf("Resolve = %v, %v", c, err)
	}
	for _, ref := range []CredentialRef{"secret://rack-1/other", "/etc/shadow", "file:///etc/shadow"} {
		if _, err := a.Resolve(context.Background(), ref); proto.CodeOf(err) != proto.InvalidConfig {
			t.Errorf("Resolve(%s) = %v, want INVALID_CONFIG", ref, err)
		}
	}
	if _, err := (Attached{}).Resolve(context.Background(), "secret://rack-1/bmc"); proto.CodeOf(err) != proto.InvalidConfig {
		t.Errorf("no credential attached: %v, want INVALID_CONFIG", err)
	}
}
