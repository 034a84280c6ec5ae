package cache

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The crash test runs the cache in a child process (this test binary, re-executed into
// TestCrashChild), kills it with SIGKILL at random points of a pull, and checks after
// each kill that nothing half-made is visible and that the next start carries on.

const crashChildEnv = "BC_CACHE_CRASH_CHILD"

// crashChild is what the parent tells the child, as JSON in crashChildEnv.
type crashChild struct {
	Dir       string           `json:"dir"`
	CAFile    string           `json:"caFile"`
	Image     proto.CacheImage `json:"image"`
	Bandwidth int64            `json:"bandwidth"`
}

// TestCrashChild is the child: it runs a cache, serves it on loopback, prints
// "addr HOST:PORT" and then "report JSON" for every report, until it is killed.
func TestCrashChild(t *testing.T) {
	env := os.Getenv(crashChildEnv)
	if env == "" {
		t.Skip("run by TestCrashDuringPull")
	}
	var cc crashChild
	if err := json.Unmarshal([]byte(env), &cc); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(readFile(t, cc.CAFile))
	out := make(chan string, 64)
	go func() {
		for line := range out {
			fmt.Println(line)
		}
	}()
	c, err := Open(Config{Dir: cc.Dir, RootCAs: pool, BandwidthBytesPerSec: cc.Bandwidth, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Reporter: ReporterFunc(func(e []proto.ImageCacheEntry) {
			b, _ := json.Marshal(e)
			out <- "report " + string(b)
		})})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(ln, c.Handler())
	out <- "addr " + ln.Addr().String()
	if err := c.SetDesired([]proto.CacheImage{cc.Image}); err != nil {
		t.Fatal(err)
	}
	c.Run(context.Background())
}

// child is a running child process.
type child struct {
	cmd     *exec.Cmd
	addr    string
	reports chan []proto.ImageCacheEntry
}

func startChild(t *testing.T, cc crashChild) *child {
	t.Helper()
	env, _ := json.Marshal(cc)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v=false")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+string(env))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, reports: make(chan []proto.ImageCacheEntry, 1024)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			kind, rest, _ := strings.Cut(sc.Text(), " ")
			switch kind {
			case "addr":
				addr <- rest
			case "report":
				var e []proto.ImageCacheEntry
				if json.Unmarshal([]byte(rest), &e) == nil {
					ch.reports <- e
				}
			}
		}
		close(ch.reports)
	}()
	select {
	case ch.addr = <-addr:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the child did not start")
	}
	return ch
}

func (ch *child) kill() {
	ch.cmd.Process.Signal(syscall.SIGKILL)
	ch.cmd.Wait()
}

// checkServed GETs the image from the child: 404, or exactly the artifact.
func checkServed(t *testing.T, addr string, a artifact) (ready bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + ImagePathPrefix + a.digest)
	if err != nil {
		return false // the child is gone
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound:
		return false
	case http.StatusOK:
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return false // killed while sending
		}
		if string(b) != string(a.data) {
			t.Fatalf("the child served %d bytes that are not the image", len(b))
		}
		return true
	}
	t.Fatalf("GET: %s", resp.Status)
	return false
}

// checkDisk: every file in sha256/ hashes to its name.
func checkDisk(t *testing.T, dir string) {
	t.Helper()
	des, _ := os.ReadDir(filepath.Join(dir, "sha256"))
	for _, de := range des {
		if err := fileHashes(filepath.Join(dir, "sha256", de.Name()), de.Name()); err != nil {
			t.Fatalf("after a kill, sha256/%s: %v", de.Name(), err)
		}
	}
}

func TestCrashDuringPull(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	const size int64 = 6 << 20
	a := newArtifact(70, int(size))
	src := newSource(t)
	url := src.add("/a", a.data)
	dir := t.TempDir()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: src.srv.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	cc := crashChild{Dir: dir, CAFile: caFile, Image: image(a, url), Bandwidth: 4 << 20}
	rng := rand.New(rand.NewPCG(2026, 9))
	partial, ready := filepath.Join(dir, "partial", a.digest), filepath.Join(dir, "sha256", a.digest)
	progress := func() int64 {
		if _, err := os.Stat(ready); err == nil {
			return size
		}
		fi, err := os.Stat(partial)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	// Rounds 0 to 5 kill the child at a random point of the first half of what is left to
	// pull; round 6
	// once every byte is written (in the window of the fsync, the rename and the index
	// write); round 7 right after a start, while the ready file is re-verified.
	const rounds = 8
	for round := range rounds {
		at := progress()
		killAt := size
		if at < size {
			killAt = at + 1 + rng.Int64N((size-at)/2+1)
		}
		var extra time.Duration
		switch round {
		case 6:
			killAt, extra = size, time.Duration(rng.IntN(20))*time.Millisecond
		case 7:
			killAt, extra = 0, time.Duration(rng.IntN(50))*time.Millisecond
		}
		ch := startChild(t, cc)
		deadline := time.Now().Add(60 * time.Second)
		for i := 0; progress() < killAt && time.Now().Before(deadline); i++ {
			if i%16 == 0 {
				checkServed(t, ch.addr, a)
			}
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(extra)
		ch.kill()
		checkDisk(t, dir)
		t.Logf("round %d: killed at %d of %d bytes on disk (from %d)", round, progress(), size, at)
	}

	// The last start runs to the end.
	ch := startChild(t, cc)
	defer ch.kill()
	want := []proto.ImageCacheEntry{{Digest: a.digest, State: proto.CacheReady, SizeBytes: size, Sources: []string{url}}}
	var last []proto.ImageCacheEntry
	deadline := time.After(120 * time.Second)
	for !cmp.Equal(last, want, cmpopts.IgnoreFields(proto.ImageCacheEntry{}, "LastUsed")) {
		select {
		case last = <-ch.reports:
		case <-deadline:
			t.Fatalf("no report of the ready image; last %+v", last)
		}
		checkServed(t, ch.addr, a)
	}
	if !checkServed(t, ch.addr, a) {
		t.Fatal("reported ready but not served")
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "partial")); len(left) != 0 {
		t.Errorf("partial/ holds %d files once ready", len(left))
	}
	t.Logf("%d bytes served by the source for a %d-byte image over %d kills", src.served.Load(), size, rounds)
}
