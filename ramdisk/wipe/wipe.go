// Package wipe is disk.wipe on the ramdisk: it picks every disk of the machine (never
// the ramdisk's own media, removable or virtual media, loop, RAM or read-only devices),
// wipes each in the mode asked with the strongest method the device offers for that mode
// (quick: the signatures; secure-erase: NVMe Format or Sanitize, ATA SECURITY ERASE UNIT,
// BLKSECDISCARD; crypto-erase: NVMe cryptographic Format or Sanitize, ATA CRYPTO
// SCRAMBLE), never a weaker one, and reads each back to check what the method promises.
// docs/ramdisk.md describes the modes device by device.
package wipe

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/ramdisk/disk"
	"golang.org/x/sys/unix"
)

// pollEvery is how often a long erase's progress is read and reported.
const pollEvery = 5 * time.Second

// eraseTimeout is disk.wipe's step timeout: it bounds a whole Run, and each erase
// command in the kernel.
const eraseTimeout = 6 * time.Hour

// Defaults of Options.
const (
	DefaultBlocks    = 64
	DefaultBlockSize = 4096
)

// Disk is one disk a wipe covers.
type Disk struct {
	// DiskInfo is the disk as the inventory reads it; its Transport (nvme, sata,
	// virtio, usb, ...) picks the erase commands.
	proto.DiskInfo
	// Path is its block device, /dev/<name>.
	Path string
	// Controller is an NVMe namespace's controller character device (/dev/nvme0), ""
	// otherwise or when it has none of its own.
	Controller string
}

// Select is the disks of the inventory (as hardware/inventory reads them) a wipe covers,
// reading sysfs and procfs under root and naming devices under dev, and the devices it
// leaves out with the reason.
func Select(root, dev string, disks []proto.DiskInfo) ([]Disk, []proto.SkippedDisk) {
	mounted := mountedDisks(root)
	var out []Disk
	var skipped []proto.SkippedDisk
	for _, d := range disks {
		sys := filepath.Join(root, "sys/block", d.Name)
		t := d.Transport
		reason := ""
		switch {
		case virtualName.MatchString(d.Name):
			reason = "a loop, RAM, optical or virtual device"
		case readText(sys, "removable") == "1":
			reason = "removable media (CD-ROM, BMC virtual media, USB stick)"
		case readText(sys, "ro") == "1":
			reason = "read-only"
		case t == "usb" && strings.Contains(strings.ToLower(d.Model), "virtual"):
			reason = "BMC virtual media"
		case mounted[d.Name]:
			reason = "holds a mounted filesystem: the ramdisk's own media"
		case d.SizeBytes <= 0:
			reason = "no capacity"
		}
		if reason != "" {
			skipped = append(skipped, proto.SkippedDisk{Name: d.Name, Reason: reason})
			continue
		}
		w := Disk{DiskInfo: d, Path: filepath.Join(dev, d.Name)}
		if t == "nvme" {
			if link, err := os.Readlink(filepath.Join(sys, "device")); err == nil && nvmeController.MatchString(filepath.Base(link)) {
				w.Controller = filepath.Join(dev, filepath.Base(link))
			}
		}
		out = append(out, w)
	}
	return out, skipped
}

var (
	virtualName    = regexp.MustCompile(`^(loop|ram|zram|sr|fd|nbd|dm-|md)[0-9]`)
	nvmeController = regexp.MustCompile(`^nvme[0-9]+$`)
)

// mountedDisks are the disks (by kernel name) holding a mounted filesystem or an active
// swap: the media the ramdisk itself runs from, if any.
func mountedDisks(root string) map[string]bool {
	out := map[string]bool{}
	raw, _ := os.ReadFile(filepath.Join(root, "proc/self/mountinfo"))
	for line := range strings.Lines(string(raw)) {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		if d := diskOf(root, f[2]); d != "" {
			out[d] = true
		}
	}
	swaps, _ := os.ReadFile(filepath.Join(root, "proc/swaps"))
	for line := range strings.Lines(string(swaps)) {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "/dev/") {
			name := strings.TrimPrefix(f[0], "/dev/")
			if _, err := os.Stat(filepath.Join(root, "sys/class/block", name)); err == nil {
				if d := diskOf(root, readText(filepath.Join(root, "sys/class/block", name), "dev")); d != "" {
					out[d] = true
				}
			}
		}
	}
	return out
}

// diskOf is the disk a block device major:minor is or is a partition of.
func diskOf(root, majMin string) string {
	link, err := filepath.EvalSymlinks(filepath.Join(root, "sys/dev/block", majMin))
	if err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join(link, "partition")); err == nil {
		return filepath.Base(filepath.Dir(link))
	}
	return filepath.Base(link)
}

func readText(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return strings.TrimSpace(string(b))
}

// Options are how Run wipes.
type Options struct {
	// Mode is one of proto.WipeModes but none.
	Mode string
	// Progress, if set, receives the percent done per disk as it changes.
	Progress func(proto.WipeProgress)
	// Blocks is how many random blocks of BlockSize bytes a read-back reads beside the
	// first and last MiB (DefaultBlocks, DefaultBlockSize when zero).
	Blocks    int
	BlockSize int64
}

// Run wipes every disk in o.Mode, all at once, and returns what it did to each. A disk
// the mode cannot wipe is reported unwiped with the reason; Run never falls back to a
// weaker method. Cancelling ctx, or the step's 6 hours passing, stops each disk at its
// next stage; an erase the device runs in its firmware goes on to its end (no command
// stops it).
func Run(ctx context.Context, disks []Disk, o Options) proto.DiskWipeResult {
	ctx, cancel := context.WithTimeout(ctx, eraseTimeout)
	defer cancel()
	if o.Blocks == 0 {
		o.Blocks = DefaultBlocks
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	p := &progress{report: o.Progress, state: proto.WipeProgress{Mode: o.Mode, Percent: map[string]int{}}}
	res := proto.DiskWipeResult{Mode: o.Mode, Disks: make([]proto.WipedDisk, len(disks))}
	var wg sync.WaitGroup
	for i, d := range disks {
		wg.Go(func() {
			res.Disks[i] = wipeDisk(ctx, d, o, func(pct int) { p.set(d.Name, pct) })
		})
	}
	wg.Wait()
	return res
}

// progress is the percent done of every disk, reported on each change.
type progress struct {
	mu     sync.Mutex
	report func(proto.WipeProgress)
	state  proto.WipeProgress
}

func (p *progress) set(name string, pct int) {
	if p.report == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.state.Percent[name]; ok && old == pct {
		return
	}
	p.state.Percent[name] = pct
	snap := proto.WipeProgress{Mode: p.state.Mode, Percent: make(map[string]int, len(p.state.Percent))}
	for k, v := range p.state.Percent {
		snap.Percent[k] = v
	}
	p.report(snap)
}

// erase is one method's run over a disk: what it is, and what the disk reads after it.
type erase struct {
	method string
	expect string
	run    func(ctx context.Context, pct func(int)) error
	// done, if set, releases what choosing the method opened.
	done func()
}

// wipeDisk wipes one disk and reads it back.
func wipeDisk(ctx context.Context, d Disk, o Options, pct func(int)) (out proto.WipedDisk) {
	out = proto.WipedDisk{Name: d.Name, Model: d.Model, Serial: d.Serial, SizeBytes: d.SizeBytes, Transport: d.Transport}
	start := time.Now()
	defer func() { out.Duration = time.Since(start).Round(time.Millisecond).String() }()
	pct(0)
	t, err := disk.Open(d.Path)
	if err != nil {
		out.Unwiped = err.Error()
		return out
	}
	defer t.Close()
	size := t.Capacity()
	if size < 0 { // a regular file, in tests
		if st, err := t.File().Stat(); err == nil {
			size = st.Size()
		}
	}
	if size <= 0 {
		out.Unwiped = "the device has no capacity"
		return out
	}
	out.SizeBytes = size
	out.Hidden = hiddenCapacity(d, t.File())
	e, why := choose(d, t, size, o.Mode, &out)
	if e == nil {
		out.Unwiped = why
		return out
	}
	if e.done != nil {
		defer e.done()
	}
	plan := readPlan(size, o.Mode, o.Blocks, o.BlockSize)
	before, err := plan.sample(t.File())
	if err != nil {
		out.Unwiped = fmt.Sprintf("read before the erase: %v", err)
		return out
	}
	if err := ctx.Err(); err != nil {
		out.Unwiped = "cancelled"
		return out
	}
	if err := e.run(ctx, func(p int) { pct(min(p, 95)) }); err != nil {
		out.Unwiped = fmt.Sprintf("%s: %v", e.method, err)
		if u, ok := errors.AsType[errUnsupported](err); ok {
			out.Unwiped = u.reason
		}
		return out
	}
	out.Method, out.Wiped, out.Bytes = e.method, true, size
	if e.method == proto.WipeMethodSignatures {
		out.Bytes = plan.zeroedBytes()
	}
	rb := plan.check(t.File(), e.expect, before)
	out.ReadBack = &rb
	pct(100)
	return out
}

// choose is the method that wipes d in mode, or why none does. It asks the device what it
// offers (NVMe Identify, ATA IDENTIFY DEVICE) and records what matters on out.
func choose(d Disk, t *disk.Target, size int64, mode string, out *proto.WipedDisk) (*erase, string) {
	f := t.File()
	if mode == proto.WipeQuick {
		return &erase{method: proto.WipeMethodSignatures, expect: proto.ExpectZeroes, run: func(ctx context.Context, pct func(int)) error {
			discarded, err := t.Discard()
			if err != nil {
				return err
			}
			out.Discarded = discarded
			pct(50)
			return zeroSignatures(f, size)
		}}, ""
	}
	if mode != proto.WipeSecureErase && mode != proto.WipeCryptoErase {
		return nil, fmt.Sprintf("mode %q wipes nothing", mode)
	}
	crypto := mode == proto.WipeCryptoErase
	var refusals []string
	switch d.Transport {
	case "nvme":
		e, why := nvmeErase(f, d.Controller, crypto)
		if e != nil {
			return e, ""
		}
		refusals = append(refusals, why)
	case "sata":
		e, why := ataErase(f, crypto)
		if e != nil {
			return e, ""
		}
		refusals = append(refusals, why)
	}
	if crypto {
		if len(refusals) == 0 {
			refusals = append(refusals, "no cryptographic erase on this device")
		}
		return nil, strings.Join(refusals, "; ")
	}
	// BLKSECDISCARD is tried last: the kernel answers EOPNOTSUPP for a device without it.
	return &erase{method: proto.WipeMethodSecureDiscard, expect: proto.ExpectChanged, run: func(ctx context.Context, pct func(int)) error {
		r := [2]uint64{0, uint64(size)}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKSECDISCARD, uintptr(unsafe.Pointer(&r)))
		if errno == unix.EOPNOTSUPP || errno == unix.ENOTTY || errno == unix.EINVAL {
			return errUnsupported{strings.Join(append(refusals, "the device offers no secure discard (BLKSECDISCARD)"), "; ")}
		}
		if errno != 0 {
			return fmt.Errorf("BLKSECDISCARD: %w", errno)
		}
		return nil
	}}, ""
}

// errUnsupported is a method the device turned out not to offer: the disk is unwiped
// for the mode, with the reason alone.
type errUnsupported struct{ reason string }

func (e errUnsupported) Error() string { return e.reason }

// nvmeErase is the NVMe method of a mode: Sanitize where the controller offers the
// action, else Format NVM with the matching Secure Erase Settings.
func nvmeErase(f *os.File, ctrl string, crypto bool) (*erase, string) {
	dev, err := openNVMe(f, ctrl)
	if err != nil {
		return nil, fmt.Sprintf("NVMe: %v", err)
	}
	c, ns, err := dev.identify()
	if err != nil {
		dev.close(f)
		return nil, fmt.Sprintf("NVMe identify: %v", err)
	}
	expect := ns.DeallocatedReads
	if expect == "" {
		expect = proto.ExpectChanged
	}
	done := func() { dev.close(f) }
	sanitize := func(method string, action uint32) *erase {
		return &erase{method: method, expect: expect, done: done, run: func(ctx context.Context, pct func(int)) error {
			return dev.sanitize(ctx, action, func(p float64) { pct(int(p * 100)) })
		}}
	}
	format := func(method string, ses uint32) *erase {
		return &erase{method: method, expect: expect, done: done, run: func(ctx context.Context, pct func(int)) error {
			pct(5)
			return dev.format(ns, ses, eraseTimeout)
		}}
	}
	switch {
	case crypto && c.SanitizeCrypto:
		return sanitize(proto.WipeMethodNVMeSanitizeCrypto, nvmeSanitizeCrypto), ""
	case crypto && c.Format && c.CryptoErase:
		return format(proto.WipeMethodNVMeFormatCrypto, nvmeSESCrypto), ""
	case crypto:
		done()
		return nil, "the NVMe controller offers neither Sanitize crypto erase (SANICAP) nor cryptographic Format (FNA)"
	case c.SanitizeBlock:
		return sanitize(proto.WipeMethodNVMeSanitizeBlock, nvmeSanitizeBlock), ""
	case c.Format:
		return format(proto.WipeMethodNVMeFormatUserData, nvmeSESUserData), ""
	}
	done()
	return nil, "the NVMe controller offers neither Sanitize block erase nor Format NVM"
}

// ataErase is the SATA method of a mode: SECURITY ERASE UNIT (normal erase) for
// secure-erase, SANITIZE CRYPTO SCRAMBLE for crypto-erase. A device whose security is
// frozen (by the BIOS at boot), locked or already has a password is reported as such.
func ataErase(f *os.File, crypto bool) (*erase, string) {
	dev := ataDevice{f}
	s, err := dev.identify()
	if err != nil {
		return nil, fmt.Sprintf("ATA IDENTIFY DEVICE: %v", err)
	}
	if crypto {
		if !s.CryptoScramble {
			return nil, "the SATA device offers no SANITIZE CRYPTO SCRAMBLE"
		}
		return &erase{method: proto.WipeMethodATACryptoScramble, expect: proto.ExpectChanged, run: func(ctx context.Context, pct func(int)) error {
			return dev.cryptoScramble(ctx, func(p float64) { pct(int(p * 100)) })
		}}, ""
	}
	switch {
	case !s.Supported:
		return nil, "the SATA device offers no ATA security erase"
	case s.Frozen:
		return nil, "ATA security is frozen (the firmware froze it at boot; a suspend and resume or a hot plug of the disk thaws it)"
	case s.Locked:
		return nil, "ATA security is locked by a password this ramdisk does not know"
	case s.Enabled:
		return nil, "ATA security has a user password this ramdisk does not know"
	}
	return &erase{method: proto.WipeMethodATASecurityErase, expect: proto.ExpectZeroes, run: func(ctx context.Context, pct func(int)) error {
		pw, err := password()
		if err != nil {
			return err
		}
		timeout := eraseTimeout
		if s.EraseTime > 0 {
			timeout = min(eraseTimeout, 2*s.EraseTime+time.Minute)
		}
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- dev.securityErase(pw, timeout) }()
		for {
			select {
			case err := <-done:
				return err
			case <-time.After(pollEvery):
				if s.EraseTime > 0 {
					pct(int(100 * time.Since(start) / s.EraseTime))
				}
			}
		}
	}}, ""
}

// password is a temporary ATA user password for one erase.
func password() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "bc-" + hex.EncodeToString(b), nil
}

// signatureOffsets are where signatures live beyond the first and last MiB: btrfs's
// superblock mirrors at 64 MiB and 256 GiB.
var signatureOffsets = []int64{64 << 20, 256 << 30}

// zeroSignatures zeroes the first and last MiB (both GPT headers, MBR, and every
// filesystem, RAID and LVM superblock kept there) and the superblock mirrors.
func zeroSignatures(f *os.File, size int64) error {
	zero := make([]byte, disk.MiB)
	for _, r := range signatureRanges(size) {
		if _, err := f.WriteAt(zero[:r[1]], r[0]); err != nil {
			return err
		}
	}
	return f.Sync()
}

// signatureRanges are the [offset, length] ranges a quick wipe zeroes on a disk of size
// bytes.
func signatureRanges(size int64) [][2]int64 {
	rs := [][2]int64{{0, min(disk.MiB, size)}}
	if size > disk.MiB {
		start := max(disk.MiB, size-disk.MiB)
		rs = append(rs, [2]int64{start, size - start})
	}
	for _, off := range signatureOffsets {
		if off+disk.MiB <= size-disk.MiB {
			rs = append(rs, [2]int64{off, disk.MiB})
		}
	}
	return rs
}

// plan is what a read-back reads: whole ranges (a quick wipe's signature ranges, the
// first and last MiB) and random blocks, in blocks of bs bytes.
type plan struct {
	bs      int64
	ranges  [][2]int64
	random  []int64
	nRandom int
}

// readPlan chooses what the read-back of a disk of size bytes wiped in mode reads.
func readPlan(size int64, mode string, blocks int, bs int64) plan {
	p := plan{bs: bs}
	if mode == proto.WipeQuick {
		p.ranges = signatureRanges(size)
		return p
	}
	p.ranges = signatureRanges(size)[:min(2, len(signatureRanges(size)))]
	if n := size / bs; n > 0 {
		for range blocks {
			i, err := rand.Int(rand.Reader, big.NewInt(n))
			if err != nil {
				break
			}
			p.random = append(p.random, i.Int64()*bs)
		}
	}
	p.nRandom = len(p.random)
	return p
}

// offsets are the blocks the plan reads, by offset, with their length.
func (p plan) blocks() [][2]int64 {
	var out [][2]int64
	for _, r := range p.ranges {
		for off := r[0]; off < r[0]+r[1]; off += p.bs {
			out = append(out, [2]int64{off, min(p.bs, r[0]+r[1]-off)})
		}
	}
	for _, off := range p.random {
		out = append(out, [2]int64{off, p.bs})
	}
	return out
}

func (p plan) zeroedBytes() int64 {
	var n int64
	for _, r := range p.ranges {
		n += r[1]
	}
	return n
}

// sample is the digest of every block the plan reads, before the erase.
func (p plan) sample(f *os.File) ([][32]byte, error) {
	if err := flush(f); err != nil {
		return nil, err
	}
	var out [][32]byte
	buf := make([]byte, p.bs)
	for _, b := range p.blocks() {
		if _, err := f.ReadAt(buf[:b[1]], b[0]); err != nil {
			return nil, fmt.Errorf("at %d: %w", b[0], err)
		}
		out = append(out, sha256.Sum256(buf[:b[1]]))
	}
	return out, nil
}

// check reads the plan's blocks again, past the kernel's cache, and compares each with
// expect: zeroes, ones, or (changed) anything but what it held before, all zeroes and all
// ones being always fine.
func (p plan) check(f *os.File, expect string, before [][32]byte) proto.ReadBack {
	rb := proto.ReadBack{Expect: expect, Blocks: p.nRandom, BlockSize: p.bs}
	if err := flush(f); err != nil {
		rb.Failure = err.Error()
		return rb
	}
	buf := make([]byte, p.bs)
	for i, b := range p.blocks() {
		data := buf[:b[1]]
		if _, err := f.ReadAt(data, b[0]); err != nil {
			rb.Failure = fmt.Sprintf("read at %d: %v", b[0], err)
			return rb
		}
		zeroes, ones := all(data, 0), all(data, 0xff)
		ok := false
		switch expect {
		case proto.ExpectZeroes:
			ok = zeroes
		case proto.ExpectOnes:
			ok = ones
		case proto.ExpectChanged:
			ok = zeroes || ones || sha256.Sum256(data) != before[i]
		}
		if !ok {
			rb.Failure = fmt.Sprintf("the %d bytes at offset %d do not read as %s", len(data), b[0], expect)
			return rb
		}
	}
	rb.Passed = true
	return rb
}

func all(b []byte, v byte) bool {
	for _, c := range b {
		if c != v {
			return false
		}
	}
	return true
}

// flush writes back and drops the kernel's cached blocks of the device, so what is read
// next comes from the device (BLKFLSBUF; a regular file is synced only).
func flush(f *os.File) error {
	if err := f.Sync(); err != nil {
		return err
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKFLSBUF, 0)
	if errno != 0 && !errors.Is(errno, unix.ENOTTY) {
		return fmt.Errorf("BLKFLSBUF: %w", errno)
	}
	return nil
}
