package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// benchEnv is a positive integer from the environment, or def.
func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// buildFSImage makes what an OS image is: an ext4 file system of size bytes, filled to
// about 60% with regular files copied from /usr, and compresses it with the zstd tool
// at its default level (-3). It returns the image's and the artifact's paths.
func buildFSImage(b *testing.B, dir string, size int64) (img, art string) {
	b.Helper()
	tree := filepath.Join(dir, "tree")
	want, have := size*6/10, int64(0)
	err := filepath.WalkDir("/usr", func(path string, d fs.DirEntry, err error) error {
		if err != nil || have >= want {
			return fs.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		dst := filepath.Join(tree, path)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		n, err := copyFile(path, dst)
		if err == nil {
			have += n
		}
		return nil // an unreadable file is left out
	})
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(tree)
	img, art = filepath.Join(dir, "image.raw"), filepath.Join(dir, "image.raw.zst")
	for _, argv := range [][]string{
		{"mkfs.ext4", "-q", "-F", "-d", tree, img, strconv.FormatInt(size>>10, 10) + "k"},
		{"zstd", "-q", "-f", "-3", "-T0", img, "-o", art},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	b.Logf("image: ext4 of %d MiB holding %d MiB of files from /usr", size>>20, have>>20)
	return img, art
}

func copyFile(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// benchTarget is where one side of a pair writes: a file on tmpfs, or a loop device
// over a file on the machine's disk.
type benchTarget struct {
	name       string
	ours, peer string
	// prepare is the peer's first step: it makes its target read zeros, as deploy.image
	// does with its own (a file cut to nothing, a device zeroed with BLKZEROOUT), so that
	// `zstd --sparse` may seek over zero runs as deploy.image skips them.
	prepare string
}

// loopTargets makes two loop devices of size bytes over sparse files in dir, marked
// non-rotational as an NVMe disk is, so that deploy.image zeroes them with BLKZEROOUT
// (the loop driver zeroes the range of its file with fallocate) and skips zeros, as on
// an NVMe disk. They pass writes on to their files with direct I/O, as a disk has no
// second page cache behind it: without it the loop driver copies every block into the
// file's page cache on the machine's own cores and the final sync writes it out.
func loopTargets(b *testing.B, dir string, size int64) (ours, peer string, err error) {
	var devs []string
	for _, name := range []string{"ours.loop", "peer.loop"} {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			return "", "", err
		}
		if err := os.Truncate(file, size); err != nil {
			return "", "", err
		}
		out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", file).CombinedOutput()
		if err != nil {
			return "", "", fmt.Errorf("losetup: %v: %s", err, out)
		}
		dev := strings.TrimSpace(string(out))
		b.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
		rot := filepath.Join("/sys/block", filepath.Base(dev), "queue", "rotational")
		if err := os.WriteFile(rot, []byte("0"), 0); err != nil {
			return "", "", err
		}
		devs = append(devs, dev)
	}
	return devs[0], devs[1], nil
}

// serveApart serves the file at path over HTTP on loopback from a process of its own
// (this test binary, running TestBenchFileServer), so that serving takes none of the
// processors of the process deploy.image runs in, as it takes none of the peer's; it
// returns the file's URL and the server's CPU time so far, to read before and after
// each side.
func serveApart(b *testing.B, path string) (string, func() time.Duration) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchFileServer$")
	cmd.Env = append(os.Environ(), "BC_BENCH_SERVE="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("the file server: %v", err)
	}
	cpu := func() time.Duration { return testkit.ProcessCPU(b, cmd.Process.Pid) }
	return "http://" + strings.TrimSpace(line) + "/" + filepath.Base(path), cpu
}

// TestBenchFileServer is the file server of serveApart, run only in the process it
// starts: it serves BC_BENCH_SERVE's directory on a loopback port it prints, until
// killed.
func TestBenchFileServer(t *testing.T) {
	path := os.Getenv("BC_BENCH_SERVE")
	if path == "" {
		t.Skip("run by BenchmarkDeployImage only")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(l.Addr())
	t.Fatal(http.Serve(l, http.FileServer(http.Dir(filepath.Dir(path)))))
}

// run is one timed run: its wall time and the CPU time it used.
type run struct{ wall, cpu time.Duration }

// sideReport is what a side run apart (TestBenchSide) prints on its last line: its
// timing from just before the work to just after it, the garbage collections within
// it, and deploy.image's result.
type sideReport struct {
	Wall, CPU time.Duration
	GCs       uint32
	Result    Result
}

// sidePrefix starts the line TestBenchSide prints its report on.
const sidePrefix = "bench-side: "

// apart runs one side in a process of its own (this test binary, running TestBenchSide
// with env set), as the ramdisk runs deploy.image in `bcd ramdisk` and the peer's tools
// run in theirs. The run is the process's own timing of the work; start-up is the
// difference to the process's whole wall and CPU time, returned beside it.
func apart(b *testing.B, env ...string) (r run, startup run, rep sideReport) {
	b.Helper()
	start := time.Now()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchSide$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("%s: %v\n%s", strings.Join(env, " "), err, out)
	}
	wall := time.Since(start)
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	i := bytes.LastIndex(out, []byte(sidePrefix))
	if i < 0 {
		b.Fatalf("%s: no report in\n%s", strings.Join(env, " "), out)
	}
	line, _, _ := bytes.Cut(out[i+len(sidePrefix):], []byte("\n"))
	if err := json.Unmarshal(line, &rep); err != nil {
		b.Fatalf("%s: report %q: %v", strings.Join(env, " "), line, err)
	}
	return run{rep.Wall, rep.CPU}, run{wall - rep.Wall, cpu - rep.CPU}, rep
}

// TestBenchSide is one side of BenchmarkDeployImage run apart, only in the process
// apart starts: with BC_BENCH_DEPLOY (an Input as JSON) one deploy.Image, with
// BC_BENCH_DECODE (an artifact's path) the decoder deploy.image uses, alone, from
// memory to io.Discard. It prints a sideReport.
func TestBenchSide(t *testing.T) {
	deployIn, decodePath := os.Getenv("BC_BENCH_DEPLOY"), os.Getenv("BC_BENCH_DECODE")
	var work func() (Result, error)
	switch {
	case deployIn != "":
		var in Input
		if err := json.Unmarshal([]byte(deployIn), &in); err != nil {
			t.Fatal(err)
		}
		work = func() (Result, error) { return Image(context.Background(), in, Options{}) }
	case decodePath != "":
		art, err := os.ReadFile(decodePath)
		if err != nil {
			t.Fatal(err)
		}
		// Read once before the timing: on the development VM the first read of memory
		// the kernel has just filled costs about 6 µs a page (0.6 s for a 410 MiB
		// artifact, with no page fault in the guest), which no stream pays: deploy.image
		// reads into eight chunks it reuses, and zstd -d into one buffer.
		_ = bytes.Count(art, []byte{0})
		work = func() (Result, error) {
			d, err := newZstdReader(bytes.NewReader(art), zstdConcurrency)
			if err != nil {
				return Result{}, err
			}
			defer d.Close()
			n, err := io.Copy(io.Discard, d)
			return Result{ImageBytes: n}, err
		}
	default:
		t.Skip("run by BenchmarkDeployImage only")
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gcs := ms.NumGC
	cpu, start := selfCPU(), time.Now()
	res, err := work()
	rep := sideReport{Wall: time.Since(start), CPU: selfCPU() - cpu, Result: res}
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&ms)
	rep.GCs = ms.NumGC - gcs
	line, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s%s\n", sidePrefix, line)
}

func selfCPU() time.Duration {
	var u syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// shell runs a bash script, timed; its CPU time is the script's and its children's.
func shell(b *testing.B, script string) run {
	b.Helper()
	start := time.Now()
	cmd := exec.Command("bash", "-o", "pipefail", "-e", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("%s: %v\n%s", script, err, out)
	}
	wall := time.Since(start)
	return run{wall, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
}

// spread is the median (testkit.Median, as every make bench figure), minimum and
// maximum of v.
func spread(v []float64) (med, lo, hi float64) {
	return testkit.Median(v), slices.Min(v), slices.Max(v)
}

func medianRun(rs []run) run {
	w := make([]time.Duration, len(rs))
	c := make([]time.Duration, len(rs))
	for i, r := range rs {
		w[i], c[i] = r.wall, r.cpu
	}
	slices.Sort(w)
	slices.Sort(c)
	return run{w[len(w)/2], c[len(c)/2]}
}

// BenchmarkDeployImage streams a realistic image with deploy.image and compares it with
// the standard tools doing the same work, measured in the same run:
//
//   - the image is an ext4 file system (BC_BENCH_IMAGE_MIB, 2048 by default) about 60%
//     full of files copied from /usr, compressed by `zstd -3`, served over HTTP on
//     loopback by one file server in a process of its own, for both sides;
//   - deploy.image runs in a process of its own (this test binary, TestBenchSide), as
//     it runs in `bcd ramdisk`: timed from just before deploy.Image to just after it,
//     with that process's CPU time, the process's start-up and exit left out (printed);
//   - the peer fetches it with curl, hashes it with openssl (SHA extensions, like Go's
//     sha256) beside the decoding and checks the digest, decodes with `zstd -d --sparse`
//     (zero runs seeked over, as deploy.image skips them) and syncs the target, after
//     zeroing it as deploy.image does;
//   - the decode limit is `zstd -d` of the same artifact from tmpfs to /dev/null: the
//     slowest single stage, which the writer can approach but not beat; beside it the
//     Go decoder deploy.image uses, alone, from memory to io.Discard, in a process of
//     its own too (the artifact read into memory and once through before the timing),
//     which says how much of the gap is the decoder's own;
//   - the targets are a file on tmpfs and, as root, a loop device over a file on the
//     machine's disk.
//
// Each target gets BC_BENCH_PAIRS rounds (5 by default) of deploy.image, the peer, the
// decode limit and the decoder alone, their order reversed every other round; the figures are the medians of the ratios
// within rounds, with their minimum and maximum, of wall times and of CPU times. What
// the two sides wrote must be byte-identical.
func BenchmarkDeployImage(b *testing.B) {
	for _, tool := range []string{"bash", "curl", "openssl", "tee", "zstd", "mkfs.ext4", "sync"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s is not installed (.ci/deps.sh)", tool)
		}
	}
	size := int64(benchEnv("BC_BENCH_IMAGE_MIB", 2048)) << 20
	pairs := testkit.PairRounds(b)
	dir := b.TempDir()
	shm := dir
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		var err error
		if shm, err = os.MkdirTemp("/dev/shm", "bc-bench-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(shm) })
	}
	img, artPath := buildFSImage(b, shm, size)
	st, err := os.Stat(artPath)
	if err != nil {
		b.Fatal(err)
	}
	want := fileDigest(b, artPath)
	imgDigest := fileDigest(b, img)
	os.Remove(img)
	url, serverCPU := serveApart(b, artPath)
	b.Logf("artifact: %d MiB as zstd -3 (%.1f%% of the image)", st.Size()>>20, 100*float64(st.Size())/float64(size))

	// deploy.image opens an existing target and creates none.
	if err := os.WriteFile(filepath.Join(shm, "ours"), nil, 0o600); err != nil {
		b.Fatal(err)
	}
	targets := []benchTarget{{name: "tmpfs file", ours: filepath.Join(shm, "ours"), peer: filepath.Join(shm, "peer"), prepare: ": >" + filepath.Join(shm, "peer")}}
	if os.Geteuid() != 0 {
		b.Log("not root: no loop device target")
	} else if ours, peer, err := loopTargets(b, dir, size); err != nil {
		b.Logf("no loop device target: %v", err)
	} else {
		targets = append(targets, benchTarget{name: "loop device on disk", ours: ours, peer: peer, prepare: "blkdiscard -f -z " + peer})
	}

	for b.Loop() {
		for _, t := range targets {
			peerScript := fmt.Sprintf("%s || exit 1\nd=$(curl -sSf %s | tee >(openssl dgst -sha256 -r | cut -d' ' -f1 >%s/peer.sha256) | zstd -d -q --sparse -f -o %s; wait $!; cat %s/peer.sha256)\n"+
				"[ \"$d\" = %s ] || { echo digest mismatch: $d; exit 1; }\nsync %s",
				t.prepare, url, shm, t.peer, shm, want, t.peer)
			limitScript := fmt.Sprintf("zstd -d -q -c %s >/dev/null", artPath)
			in, err := json.Marshal(Input{SourceURL: url, Digest: want, Format: proto.FormatRaw, Compression: proto.CompressionZstd, Target: t.ours})
			if err != nil {
				b.Fatal(err)
			}
			var ours, oursStartup, peer, limit, goDecode []run
			var oursServed, peerServed []time.Duration // the file server's CPU time for each side's stream
			var res Result
			gcs := 0
			for i := range pairs {
				sides := []func(){
					func() {
						served := serverCPU()
						r, up, rep := apart(b, "BC_BENCH_DEPLOY="+string(in))
						oursServed = append(oursServed, serverCPU()-served)
						ours, oursStartup, res = append(ours, r), append(oursStartup, up), rep.Result
						gcs += int(rep.GCs)
					},
					func() {
						served := serverCPU()
						peer = append(peer, shell(b, peerScript))
						peerServed = append(peerServed, serverCPU()-served)
					},
					func() { limit = append(limit, shell(b, limitScript)) },
					func() {
						r, _, _ := apart(b, "BC_BENCH_DECODE="+artPath)
						goDecode = append(goDecode, r)
					},
				}
				if i%2 == 1 {
					slices.Reverse(sides)
				}
				for _, side := range sides {
					side()
				}
			}
			if got, gotPeer := prefixDigest(b, t.ours, size), prefixDigest(b, t.peer, size); got != imgDigest || gotPeer != imgDigest {
				b.Fatalf("%s: deploy.image wrote %s, the peer %s; the image is %s", t.name, got, gotPeer, imgDigest)
			}
			vsPeer, vsLimit := make([]float64, pairs), make([]float64, pairs)
			cpuPeer, cpuLimit := make([]float64, pairs), make([]float64, pairs)
			for i := range pairs {
				vsPeer[i] = peer[i].wall.Seconds() / ours[i].wall.Seconds()
				vsLimit[i] = ours[i].wall.Seconds() / limit[i].wall.Seconds()
				cpuPeer[i] = peer[i].cpu.Seconds() / ours[i].cpu.Seconds()
				cpuLimit[i] = ours[i].cpu.Seconds() / limit[i].cpu.Seconds()
			}
			o, p, l, g := medianRun(ours), medianRun(peer), medianRun(limit), medianRun(goDecode)
			pm, plo, phi := spread(vsPeer)
			lm, llo, lhi := spread(vsLimit)
			b.Logf("%s: deploy.image %.2fs (%.2fs CPU), peer %.2fs (%.2fs CPU), decode limit %.2fs (%.2fs CPU); medians of %d rounds",
				t.name, o.wall.Seconds(), o.cpu.Seconds(), p.wall.Seconds(), p.cpu.Seconds(), l.wall.Seconds(), l.cpu.Seconds(), pairs)
			b.Logf("%s: peer/deploy.image %.2f (min %.2f, max %.2f; above 1: deploy.image faster); deploy.image/decode limit %.2f (min %.2f, max %.2f)",
				t.name, pm, plo, phi, lm, llo, lhi)
			cm, clo, chi := spread(cpuPeer)
			km, klo, khi := spread(cpuLimit)
			b.Logf("%s: CPU time: peer/deploy.image %.2f (min %.2f, max %.2f); deploy.image/decode limit %.2f (min %.2f, max %.2f)",
				t.name, cm, clo, chi, km, klo, khi)
			b.Logf("%s: the decoder deploy.image uses, alone (from memory to io.Discard): %.2fs (%.2fs CPU), %.2fx the CPU of zstd -d",
				t.name, g.wall.Seconds(), g.cpu.Seconds(), g.cpu.Seconds()/l.cpu.Seconds())
			slices.Sort(oursServed)
			slices.Sort(peerServed)
			b.Logf("%s: the file server's CPU time, median: %.2fs serving deploy.image, %.2fs serving the peer",
				t.name, oursServed[pairs/2].Seconds(), peerServed[pairs/2].Seconds())
			up := medianRun(oursStartup)
			b.Logf("%s: deploy.image's process: start-up and exit %.3fs (%.3fs CPU) beside the stream, not counted; %d garbage collections in %d streams",
				t.name, up.wall.Seconds(), up.cpu.Seconds(), gcs, pairs)
			b.Logf("%s: wrote %d MiB, skipped %d MiB of zeros; output byte-identical to the peer's", t.name, res.Written>>20, res.Skipped>>20)
			key := strings.Fields(t.name)[0]
			b.ReportMetric(pm, "x-peer-"+key)
			b.ReportMetric(lm, "x-limit-"+key)
		}
	}
}
