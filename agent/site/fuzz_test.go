package site

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

var fuzzRamdisk = RamdiskConfig{Kernel: "vmlinuz", Initrd: "initrd.img", Args: []string{"console=ttyS0"}}

// checkEntries checks what the boot server would see of t: each relayed entry answers
// for its MACs with its kind, and the state file reopens to the same entries.
func checkEntries(t *testing.T, file string, got *entries) {
	for _, e := range got.relayed {
		for _, m := range e.MACs {
			hw, _ := net.ParseMAC(m)
			if be, ok := got.Entry(hw); !ok || be.Kind == "" {
				t.Fatalf("MAC %s of %s has no entry (%+v)", m, e.Node, be)
			}
		}
	}
	if data, _ := got.section(); !json.Valid(data) {
		t.Fatalf("section %q", data)
	}
	if err := got.save(); err != nil {
		t.Fatal(err)
	}
	again, err := openEntries(file, fuzzRamdisk, "http://10.0.0.1:8080")
	if err != nil {
		t.Fatalf("the state file written does not reopen: %v", err)
	}
	if diff := cmp.Diff(got.relayedList(), again.relayedList()); diff != "" {
		t.Fatalf("entries change through the state file (-before +after):\n%s", diff)
	}
}

// FuzzOpenEntries reads any boot entries state file: a restarted site refuses it as
// INVALID_CONFIG, or serves every entry in it.
func FuzzOpenEntries(f *testing.F) {
	sum := strings.Repeat("ab", 32)
	for _, s := range []string{
		`[{"node":"m","macs":["52:54:00:12:34:56"],"kind":"ramdisk","ramdisk":{"token":"bcj_x.y","registry":"https://r:7443","pins":["a","b","c"]}}]`,
		`[{"node":"m","macs":["52:54:00:12:34:56"],"kind":"sanboot","sanboot":{"image":"` + sum + `"}},{"node":"n","macs":["52:54:00:12:34:57"],"kind":"disk"}]`,
		`[]`, `null`, `{}`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		file := filepath.Join(dir, entriesFile)
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := openEntries(file, fuzzRamdisk, "http://10.0.0.1:8080")
		if err != nil {
			if proto.CodeOf(err) != proto.InvalidConfig {
				t.Fatalf("error %v is not INVALID_CONFIG", err)
			}
			return
		}
		checkEntries(t, file, got)
	})
}

// FuzzPrepareRamdisk runs boot.prepareRamdisk with any input, as the registry relays it:
// it is refused, or the machine's MACs boot the ramdisk, and a restarted site does too.
func FuzzPrepareRamdisk(f *testing.F) {
	f.Add("gpu-01", []byte(`{"macs":["52:54:00:12:34:56"],"token":"bcj_x.y","registry":"https://r:7443","pins":["a","b","c"]}`))
	f.Add("gpu-01", []byte(`{"macs":["52:54:00:12:34:56"],"kernel":"`+"ab"+`","args":["x y"],"token":"t","registry":"r","pins":["a","b","c"],"later":1}`))
	f.Add("", []byte(`{"macs":[],"pins":[]}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, node string, input []byte) {
		file := filepath.Join(dir, entriesFile)
		os.Remove(file)
		es, err := openEntries(file, fuzzRamdisk, "http://10.0.0.1:8080")
		if err != nil {
			t.Fatal(err)
		}
		s := &steps{entries: es, changed: func() {}}
		payload, err := json.Marshal(proto.SiteCommand{Node: node, Input: input})
		if err != nil || !utf8.ValidString(node) {
			return // the registry relays JSON only, and node ids are ASCII
		}
		if _, err := s.handlers()[proto.CommandPrepareRamdisk](t.Context(), payload); err != nil {
			if c := proto.CodeOf(err); c != proto.InvalidInput && c != proto.InvalidConfig {
				t.Fatalf("error %v is neither INVALID_INPUT nor INVALID_CONFIG", err)
			}
			return
		}
		e, ok := es.relayed[node]
		if !ok || e.Kind != proto.BootRamdisk {
			t.Fatalf("no ramdisk entry for %q: %+v", node, es.relayed)
		}
		for _, m := range e.MACs {
			hw, _ := net.ParseMAC(m)
			if be, _ := es.Entry(hw); be.Kind != boot.KindRamdisk || be.Ramdisk.Token != e.Ramdisk.Token {
				t.Fatalf("MAC %s boots %+v", m, be)
			}
		}
		checkEntries(t, file, es)
	})
}

// A state file with an entry the site could not have written (edited, or damaged) is
// refused at start with the entry's path, not served half or crashed on.
func TestOpenEntriesRefusesBadEntry(t *testing.T) {
	for name, tc := range map[string]struct{ data, path, msg string }{
		"ramdisk without ramdisk": {`[{"node":"m","macs":["52:54:00:12:34:56"],"kind":"disk"},{"node":"n","macs":["52:54:00:12:34:57"],"kind":"ramdisk"}]`, "[1].ramdisk", "entry 1: a ramdisk entry needs"},
		"sanboot without image":   {`[{"node":"m","macs":["52:54:00:12:34:56"],"kind":"sanboot"}]`, "[0].sanboot", "entry 0: a sanboot entry needs"},
		"bad mac":                 {`[{"node":"m","macs":["6"],"kind":"disk"}]`, "[0].macs[0]", `MAC "6"`},
		"unknown field":           {"[\n {\"node\":\"m\",\"macs\":[\"52:54:00:12:34:56\"],\"kind\":\"disk\",\"colour\":1}]", "[0].colour", entriesFile + `:2:57: unknown field "colour"`},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), entriesFile)
			if err := os.WriteFile(file, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := openEntries(file, fuzzRamdisk, "http://10.0.0.1:8080")
			e := proto.AsError(err)
			if err == nil || e.Code != proto.InvalidConfig || e.Details.Path != tc.path || !strings.Contains(e.Message, tc.msg) || !strings.Contains(e.Message, "remove the file") {
				t.Fatalf("got %v (path %q), want INVALID_CONFIG at %s saying %q", err, e.Details.Path, tc.path, tc.msg)
			}
		})
	}
}
