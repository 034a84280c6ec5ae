package mount

import (
	"bytes"
	"errors"
	"testing"
)

func TestFSType(t *testing.T) {
	at := func(off int, magic string) []byte {
		b := make([]byte, 0x11000)
		copy(b[off:], magic)
		return b
	}
	fat := func(off int, name string) []byte {
		b := at(off, name)
		b[510], b[511] = 0x55, 0xaa
		return b
	}
	cases := map[string]struct {
		disk    []byte
		want    string
		wantErr error
	}{
		"ext4":      {at(1080, "\x53\xef"), "ext4", nil},
		"xfs":       {at(0, "XFSB"), "xfs", nil},
		"btrfs":     {at(0x10040, "_BHRfS_M"), "btrfs", nil},
		"fat32":     {fat(82, "FAT32   "), "vfat", nil},
		"fat16":     {fat(54, "FAT16   "), "vfat", nil},
		"zeros":     {make([]byte, 0x11000), "", ErrUnknownFS},
		"too short": {[]byte("XF"), "", ErrUnknownFS},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := FSType(bytes.NewReader(tc.disk))
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Fatalf("FSType = %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
