package gpt

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/ramdisk/gpt/gpttest"
	"github.com/google/go-cmp/cmp"
)

func disk(t *testing.T, parts []gpttest.Part) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "disk"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	if err := gpttest.Write(f, 64<<20/512, parts); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestReadAndRoot(t *testing.T) {
	esp := gpttest.Part{Type: TypeESP, UUID: "aaaaaaaa-0000-0000-0000-000000000001", Name: "EFI-SYSTEM", FirstLBA: 2048, LastLBA: 4095}
	boot := gpttest.Part{Type: TypeLinuxData, UUID: "aaaaaaaa-0000-0000-0000-000000000002", Name: "boot", FirstLBA: 4096, LastLBA: 8191}
	small := gpttest.Part{Type: TypeLinuxData, UUID: "aaaaaaaa-0000-0000-0000-000000000003", Name: "data", FirstLBA: 8192, LastLBA: 10239}
	big := gpttest.Part{Type: TypeLinuxData, UUID: "aaaaaaaa-0000-0000-0000-000000000004", Name: "", FirstLBA: 10240, LastLBA: 100000}
	named := gpttest.Part{Type: TypeLinuxData, UUID: "aaaaaaaa-0000-0000-0000-000000000005", Name: "cloudimg-rootfs", FirstLBA: 10240, LastLBA: 100000}
	typed := gpttest.Part{Type: TypeRootX86_64, UUID: "aaaaaaaa-0000-0000-0000-000000000006", Name: "x", FirstLBA: 8192, LastLBA: 10239}
	cases := map[string]struct {
		parts    []gpttest.Part
		wantRoot int
	}{
		"the root type wins":          {[]gpttest.Part{esp, typed, named}, 2},
		"a root name next":            {[]gpttest.Part{esp, boot, named}, 3},
		"else the largest linux data": {[]gpttest.Part{esp, boot, small, big}, 4},
		"no linux partition":          {[]gpttest.Part{esp}, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			parts, err := Read(disk(t, tc.parts), 512)
			if err != nil {
				t.Fatal(err)
			}
			if len(parts) != len(tc.parts) {
				t.Fatalf("read %d partitions, want %d", len(parts), len(tc.parts))
			}
			want := Partition{Number: 1, Type: TypeESP, UUID: esp.UUID, Name: "EFI-SYSTEM", Offset: 2048 * 512, Size: 2048 * 512}
			if diff := cmp.Diff(want, parts[0]); diff != "" {
				t.Errorf("first partition (-want +got):\n%s", diff)
			}
			root, ok := Root(parts)
			if got := map[bool]int{true: root.Number}[ok]; got != tc.wantRoot {
				t.Errorf("root is partition %d, want %d", got, tc.wantRoot)
			}
		})
	}
}

func TestReadRefuses(t *testing.T) {
	f := disk(t, nil)
	if _, err := Read(f, 4096); !errors.Is(err, ErrNoTable) {
		t.Errorf("4096-byte sectors: %v", err)
	}
	f.WriteAt([]byte{0xff}, 512+40)
	if _, err := Read(f, 512); !errors.Is(err, ErrNoTable) {
		t.Errorf("a corrupted header: %v", err)
	}
}
