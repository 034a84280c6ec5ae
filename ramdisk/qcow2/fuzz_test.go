package qcow2

import (
	"bytes"
	"fmt"
	"testing"
)

// boundsSink accepts any disk and checks only that nothing lands outside it.
type boundsSink struct{ size int64 }

func (b *boundsSink) Begin(size int64) error { b.size = size; return nil }

func (b *boundsSink) WriteAt(p []byte, off int64) error { return b.Zero(off, int64(len(p))) }

func (b *boundsSink) Zero(off, n int64) error {
	if off < 0 || n <= 0 || off+n > b.size {
		return fmt.Errorf("[%d, %d) outside a disk of %d", off, off+n, b.size)
	}
	return nil
}

// FuzzConvert feeds arbitrary bytes to the converter: it must return, never panic,
// and never place a byte outside the disk it announced.
func FuzzConvert(f *testing.F) {
	f.Add(build(guest(64<<10, 4), 9, tablesFirst))
	f.Add(build(guest(64<<10, 5), 9, dataFirst))
	f.Add([]byte("QFI\xfb"))
	f.Fuzz(func(t *testing.T, img []byte) {
		var sink boundsSink
		if _, err := Convert(bytes.NewReader(img), &sink, Limits{Pending: 1 << 20, Ahead: 1 << 12}); err != nil && sink.size > 0 {
			if bytes.Contains([]byte(err.Error()), []byte("outside a disk")) {
				t.Fatal(err)
			}
		}
	})
}
