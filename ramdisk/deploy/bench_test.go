package deploy

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/fetch/fetchtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/klauspost/compress/zstd"
)

// benchImage is n bytes like an OS image, quickly made: runs of 4 KiB to 1 MiB of
// text, of repeated 512-byte chunks, of random bytes and of zeros (about 40%).
func benchImage(n int) []byte {
	r := rand.New(rand.NewPCG(42, 42))
	text := diskImage(4<<20, 7) // its zero runs are skipped below
	text = bytes.ReplaceAll(text, []byte{0}, nil)
	b := make([]byte, n)
	for off := 0; off < n; {
		run := min(n-off, 4096*(1+r.IntN(256)))
		switch k := r.IntN(20); {
		case k < 8: // zeros: already there
		case k < 12:
			src := r.IntN(len(text) - run)
			copy(b[off:off+run], text[src:])
		case k < 15:
			chunk := b[off : off+min(512, run)]
			for i := range chunk {
				chunk[i] = byte(r.Uint32())
			}
			for i := len(chunk); i < run; i += copy(b[off+i:off+run], chunk) {
			}
		default:
			for i := off; i < off+run; i += 8 {
				v := r.Uint64()
				for j := 0; j < 8 && i+j < off+run; j++ {
					b[i+j] = byte(v >> (8 * j))
				}
			}
		}
		off += run
	}
	return b
}

// BenchmarkDeployImage streams a 1 GiB zstd image from loopback HTTP to a file, against
// `curl -s URL | zstd -d | dd of=FILE bs=4M` of the same image in the same run, which
// checks no digest and writes every zero. The files live on tmpfs (/dev/shm), where a
// fresh file reads zeros and fsync costs nothing, so that the pipelines are measured
// rather than this machine's virtual disk. Each side runs five times, alternately; the
// medians are compared.
func BenchmarkDeployImage(b *testing.B) {
	for _, tool := range []string{"curl", "zstd", "dd"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s is not installed (make deps)", tool)
		}
	}
	const size = 1 << 30
	raw := benchImage(size)
	var zeros int
	for i := 0; i < len(raw); i += 4096 {
		if bytes.Count(raw[i:i+4096], []byte{0}) == 4096 {
			zeros += 4096
		}
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		b.Fatal(err)
	}
	art := enc.EncodeAll(raw, nil)
	raw = nil
	s := fetchtest.New(b)
	url := s.Put("/img.raw.zst", art)
	dir := b.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if dir, err = os.MkdirTemp("/dev/shm", "bc-bench-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
	}
	in := Input{SourceURL: url, Digest: digest(art), Format: proto.FormatRaw, Compression: proto.CompressionZstd, Target: filepath.Join(dir, "ours")}
	peerFile := filepath.Join(dir, "peer")
	b.Logf("image %d MiB, %.0f%% zeros; artifact %d MiB (zstd)", size>>20, 100*float64(zeros)/size, len(art)>>20)

	var ours, peer []time.Duration
	var res Result
	for b.Loop() {
		for range 5 {
			if err := os.WriteFile(in.Target, nil, 0o600); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if res, err = Image(context.Background(), in, Options{}); err != nil {
				b.Fatal(err)
			}
			ours = append(ours, time.Since(start))
			os.Remove(peerFile)
			start = time.Now()
			cmd := exec.Command("bash", "-o", "pipefail", "-c",
				fmt.Sprintf("curl -s %s | zstd -d | dd of=%s bs=4M status=none", url, peerFile))
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("peer: %v\n%s", err, out)
			}
			peer = append(peer, time.Since(start))
		}
	}
	st, err := os.Stat(peerFile)
	if err != nil || st.Size() != size {
		b.Fatalf("the peer wrote %v bytes: %v", st.Size(), err)
	}
	if fileDigest(b, peerFile) != fileDigest(b, in.Target) {
		b.Fatal("the peer's file and ours differ")
	}
	slices.Sort(ours)
	slices.Sort(peer)
	o, p := ours[len(ours)/2], peer[len(peer)/2]
	b.ReportMetric(float64(size)/o.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(size)/p.Seconds()/1e6, "peer-MB/s")
	b.ReportMetric(p.Seconds()/o.Seconds(), "x-peer-speed")
	b.ReportMetric(float64(res.Written)/(1<<20), "MiB-written")
	b.ReportMetric(float64(st.Size())/(1<<20), "peer-MiB-written")
	b.Logf("deploy.image %.2fs (runs %v), peer %.2fs (runs %v); wrote %d MiB and skipped %d MiB of zeros, the peer wrote %d MiB",
		o.Seconds(), ours, p.Seconds(), peer, res.Written>>20, res.Skipped>>20, st.Size()>>20)
}
