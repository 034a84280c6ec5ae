package qmp

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

func TestVirtualMediaVM(t *testing.T) {
	v := startVM(t)
	d := v.open(t, v.config())
	dir := t.TempDir()
	isos := map[string]string{}
	for _, name := range []string{"a.iso", "b.iso"} {
		isos[name] = filepath.Join(dir, name)
		if err := os.WriteFile(isos[name], make([]byte, 64<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	steps := []struct {
		name string
		do   func() error
		code proto.Code
		// file is what the CD drive holds after the step; empty when nothing.
		file string
	}{
		{name: "insert a path", do: func() error { return d.Insert(ctx, isos["a.iso"]) }, file: isos["a.iso"]},
		{name: "insert a file URL replaces", do: func() error { return d.Insert(ctx, "file://"+isos["b.iso"]) }, file: isos["b.iso"]},
		{name: "insert the same", do: func() error { return d.Insert(ctx, isos["b.iso"]) }, file: isos["b.iso"]},
		{name: "eject", do: func() error { return d.Eject(ctx) }},
		{name: "eject when empty", do: func() error { return d.Eject(ctx) }},
		{name: "insert a missing file", do: func() error { return d.Insert(ctx, filepath.Join(dir, "none.iso")) }, code: proto.DriverError},
		{name: "insert an unreachable URL", do: func() error { return d.Insert(ctx, "https://127.0.0.1:1/x.iso") }, code: proto.DriverError},
		{name: "insert an ftp URL", do: func() error { return d.Insert(ctx, "ftp://127.0.0.1/x.iso") }, code: proto.InvalidConfig},
		{name: "insert a relative path", do: func() error { return d.Insert(ctx, "x.iso") }, code: proto.InvalidConfig},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := s.do(); proto.CodeOf(err) != s.code && !(err == nil && s.code == "") {
				t.Fatalf("got %v, want %s", err, s.code)
			}
			var devices []blockDevice
			v.run(t, "query-block", nil, &devices)
			got := ""
			for _, b := range devices {
				if b.named("cd0") && b.Inserted != nil {
					got = b.Inserted.File
				}
			}
			if got != s.file {
				t.Fatalf("the CD drive holds %q, want %q", got, s.file)
			}
		})
	}
}

// TestVirtualMediaUnbound: without option cd there is no virtual media.
func TestVirtualMediaUnbound(t *testing.T) {
	v := startVM(t)
	cfg := v.config()
	delete(cfg.Options, optCD)
	d := v.open(t, cfg)
	if err := d.Insert(context.Background(), "/srv/a.iso"); proto.CodeOf(err) != proto.Unsupported {
		t.Fatalf("insert: %v", err)
	}
	if err := d.Eject(context.Background()); proto.CodeOf(err) != proto.Unsupported {
		t.Fatalf("eject: %v", err)
	}
}
