package cache

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// benchImageBytes is the size of the image served by BenchmarkServeVsNginx: 1 GiB, or
// BC_BENCH_IMAGE_BYTES.
func benchImageBytes(b *testing.B) int64 {
	if s := os.Getenv("BC_BENCH_IMAGE_BYTES"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1<<20 {
			b.Fatalf("BC_BENCH_IMAGE_BYTES=%q: want a number of bytes, 1 MiB at least", s)
		}
		return n
	}
	return 1 << 30
}

// BenchmarkServeVsNginx: 100 concurrent ranged GETs that together read a cached image
// once, against the cache's handler and against nginx (sendfile on) serving the same
// file, both on loopback, with the same Go load generator. The cache requires
// capabilities, as a site whose registry names its key does, so each GET's capability is
// checked; both sides are given the same URL (nginx ignores its query). The two alternate over
// testkit.PairRounds rounds; it reports the median of the within-round throughput
// ratios (cache/nginx, above 1: the cache faster) with their minimum and maximum, and
// logs each side's median throughput.
func BenchmarkServeVsNginx(b *testing.B) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			b.Skip("nginx is not installed: scripts/bench.sh installs it")
		}
		nginx = "/usr/sbin/nginx"
	}
	size := benchImageBytes(b)
	dir := b.TempDir()
	digest := writeBenchImage(b, dir, size)

	c, err := Open(Config{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done; c.Close() }()
	for {
		if e := c.Entries(); len(e) == 1 && e[0].State == proto.CacheReady {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	c.RequireCapabilities([]ed25519.PublicKey{key.Public().(ed25519.PublicKey)})
	srv := &http.Server{Handler: c.Handler()}
	go srv.Serve(ln)
	defer srv.Close()

	nginxAddr := startNginx(b, nginx, dir)
	path := proto.CacheCapURL(ImagePathPrefix+digest, key, digest, time.Now().Add(24*time.Hour))
	const clients = 100
	rounds := testkit.PairRounds(b)
	b.ResetTimer()
	for range b.N {
		p := testkit.RunPairs(rounds, testkit.OursOverPeer,
			func() float64 { return rangedLoad(b, "http://"+ln.Addr().String()+path, size, clients) / 1e6 },
			func() float64 { return rangedLoad(b, "http://"+nginxAddr+path, size, clients) / 1e6 })
		b.Logf("%d bytes, %d concurrent ranged GETs", size, clients)
		p.Report(b, "", "cache/nginx", "cache", "nginx", "MB/s")
	}
}

// writeBenchImage writes size pseudo-random bytes to sha256/DIGEST and returns DIGEST.
func writeBenchImage(b *testing.B, dir string, size int64) string {
	ready := filepath.Join(dir, "sha256")
	if err := os.MkdirAll(ready, 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "image-")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	r := rand.New(rand.NewPCG(1, 2))
	block := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(block)) {
		for i := 0; i < len(block); i += 8 {
			v := r.Uint64()
			for j := range 8 {
				block[i+j] = byte(v >> (8 * j))
			}
		}
		chunk := block[:min(left, int64(len(block)))]
		f.Write(chunk)
		h.Write(chunk)
	}
	digest := hex.EncodeToString(h.Sum(nil))
	if err := os.Rename(f.Name(), filepath.Join(ready, digest)); err != nil {
		b.Fatal(err)
	}
	return digest
}

// startNginx runs nginx on a loopback port serving dir/sha256/ at ImagePathPrefix.
func startNginx(b *testing.B, bin, dir string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	prefix := b.TempDir()
	conf := fmt.Sprintf(`daemon off;
user root;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log stderr warn;
events { worker_connections 1024; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 100000;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	default_type application/octet-stream;
	server {
		listen %[2]s;
		location %[3]s { alias %[4]s/sha256/; }
	}
}
`, prefix, addr, ImagePathPrefix, dir)
	confPath := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", prefix, "-c", confPath)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// SIGTERM: the master stops its workers, then itself.
	b.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	for i := 0; ; i++ {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			return addr
		}
		if i > 500 {
			b.Fatal("nginx did not start listening")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const rangeLoadEnv = "BC_CACHE_RANGE_LOAD"

// rangedLoad runs the load generator in a child process (this test binary, re-executed
// into TestRangeLoadChild), so that it takes no CPU from the server measured in this one,
// and returns the throughput it measured in bytes per second.
func rangedLoad(b *testing.B, url string, size int64, clients int) float64 {
	cmd := exec.Command(os.Args[0], "-test.run=^TestRangeLoadChild$", "-test.v=false")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", rangeLoadEnv, url, size, clients))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("load generator: %v", err)
	}
	var bps float64
	if _, err := fmt.Sscanf(string(out), "throughput %g", &bps); err != nil {
		b.Fatalf("load generator said %q", out)
	}
	return bps
}

// TestRangeLoadChild is the load generator: it reads a URL's size bytes once, as clients
// concurrent ranged GETs of equal parts, and prints "throughput BYTES_PER_SECOND".
func TestRangeLoadChild(t *testing.T) {
	env := os.Getenv(rangeLoadEnv)
	if env == "" {
		t.Skip("run by BenchmarkServeVsNginx")
	}
	var url string
	var size int64
	var clients int
	if _, err := fmt.Sscanf(env, "%s %d %d", &url, &size, &clients); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, DisableCompression: true,
		ReadBufferSize: 256 << 10}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	part := size / int64(clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	start := time.Now()
	for i := range int64(clients) {
		first, last := i*part, (i+1)*part-1
		if i == int64(clients)-1 {
			last = size - 1
		}
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", first, last))
			resp, err := hc.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			buf := make([]byte, 256<<10)
			var n int64
			for {
				k, err := resp.Body.Read(buf)
				n += int64(k)
				if err == io.EOF {
					break
				}
				if err != nil {
					errs <- err
					return
				}
			}
			if resp.StatusCode != http.StatusPartialContent || n != last-first+1 {
				errs <- fmt.Errorf("%s: %s with %d bytes", url, resp.Status, n)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fmt.Printf("throughput %g\n", float64(size)/el.Seconds())
}
