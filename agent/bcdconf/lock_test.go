package bcdconf

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/better-compute/better-compute/proto/bcdargv"
)

// TestJoinsAtOnceLeaveOneWhole: two `bcd join` runs into one configuration directory at
// once, of two nodes from two registries, leave one join whole, the one that wrote last:
// every file of the directory is that join's, and the next start loads it. Never one
// join's key beside the other's certificate, nor a certificate of one with the other's
// config or serving CA.
func TestJoinsAtOnceLeaveOneWhole(t *testing.T) {
	joins := []Bundle{}
	for _, node := range []string{"node-1", "node-2"} {
		b, _ := joined(t, node)
		joins = append(joins, b)
	}
	for round := range 50 {
		dir := t.TempDir()
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, b := range joins {
			wg.Go(func() {
				<-start
				if err := Write(dir, b); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		if whole := wholeJoin(t, dir, joins); whole < 0 {
			t.Fatalf("round %d: the directory holds a mix of the two joins", round)
		}
		if _, err := LoadAgent(dir); err != nil {
			t.Fatalf("round %d: the next start: %v", round, err)
		}
	}
}

// wholeJoin is the index of the join of joins whose files dir holds, every one of them;
// -1 when it holds a mix, each file that is not the key's join's reported to t.
func wholeJoin(t *testing.T, dir string, joins []Bundle) int {
	t.Helper()
	files := func(b Bundle) map[string][]byte {
		conf, err := Encode(b.Config)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{KeyFile: b.Key, CertFile: b.Certificate, AgentCAFile: b.AgentCA,
			ServingCAFile: b.ServingCA, bcdargv.JoinEncryptionFile: b.JoinEncryptionKey, bcdargv.ConfigFile: conf}
	}
	key, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range joins {
		if !bytes.Equal(key, b.Key) {
			continue
		}
		whole := i
		for name, want := range files(b) {
			if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s is not the file of %s's join, whose key is beside it (%v)", name, b.Config.NodeID, err)
				whole = -1
			}
		}
		return whole
	}
	t.Errorf("%s is neither join's key", KeyFile)
	return -1
}
