package qmp

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
)

func TestOpenConfig(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "none.sock")
	cases := map[string]struct {
		cfg  bmc.Config
		code proto.Code
		path string
	}{
		"relative socket":  {cfg: bmc.Config{Address: "vm.sock"}, code: proto.InvalidConfig, path: "address"},
		"tcp address":      {cfg: bmc.Config{Address: "tcp:127.0.0.1:4444"}, code: proto.InvalidConfig, path: "address"},
		"credential":       {cfg: bmc.Config{Address: socket, CredentialRef: "secret://vm"}, code: proto.InvalidConfig, path: "credentialRef"},
		"unknown option":   {cfg: bmc.Config{Address: socket, Options: map[string]string{"floppy": "fd0"}}, code: proto.InvalidConfig, path: "options.floppy"},
		"bad device id":    {cfg: bmc.Config{Address: socket, Options: map[string]string{optNIC: "nic 0"}}, code: proto.InvalidConfig, path: "options.nic"},
		"bad timeout":      {cfg: bmc.Config{Address: socket, Options: map[string]string{"powerTimeout": "0s"}}, code: proto.InvalidConfig, path: "options.powerTimeout"},
		"no socket":        {cfg: bmc.Config{Address: "unix:" + socket}, code: proto.DriverError},
		"not a QMP socket": {cfg: bmc.Config{Address: notQMP(t)}, code: proto.DriverError},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Open(context.Background(), tc.cfg, bmc.Env{})
			if e := proto.AsError(err); err == nil || e.Code != tc.code || e.Details.Path != tc.path {
				t.Fatalf("got %v (path %q), want %s at %q", err, e.Details.Path, tc.code, tc.path)
			}
		})
	}
}

// notQMP serves a socket that greets like a human monitor, not QMP.
func notQMP(t *testing.T) string {
	f := newFakeVM(t, "running", false)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.greeting = "QEMU 7.2.22 monitor - type 'help' for more information\r\n"
	return f.socket
}

// TestOpenMissingDevice: every device the options name must exist in the VM.
func TestOpenMissingDevice(t *testing.T) {
	v := startVM(t)
	cfg := v.config()
	cfg.Options[optDisk] = "disk9"
	_, err := Open(context.Background(), cfg, bmc.Env{})
	if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != "options.disk" {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(v.socket); err != nil {
		t.Fatal(err)
	}
}
