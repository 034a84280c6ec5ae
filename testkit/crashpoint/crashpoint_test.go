package crashpoint

import (
	"slices"
	"testing"
)

// TestJoinResumed: a call strace split in two, as another thread's call came between
// its start and its end, is one line again where it ended, so that a check finds the
// fsync it made; the calls between keep their place.
func TestJoinResumed(t *testing.T) {
	got := joinResumed([]string{
		`27110 fsync(5</data> <unfinished ...>`,
		`27111 mkdirat(AT_FDCWD, "/data/srv", 0700) = 0`,
		`27110 <... fsync resumed>) = 0`,
		`27110 fsync(6</data/srv>) = 0`,
	})
	want := []string{
		`27111 mkdirat(AT_FDCWD, "/data/srv", 0700) = 0`,
		`27110 fsync(5</data>) = 0`,
		`27110 fsync(6</data/srv>) = 0`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
	if !fsyncs(got[1:2], "/data") {
		t.Error("the joined fsync is not found")
	}
}
