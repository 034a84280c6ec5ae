// Package ramdisk is `bcd ramdisk`, the agent of the RAM disk a machine PXE-boots for a
// deploy: it reads its node id, the registry, the pins and its single-use token from
// the kernel command line, joins as the node's ramdisk, and runs the commands the
// registry relays with the ramdisk library (ramdisk/) and the machine's (hardware/):
// inventory.refresh with the identity check, deploy.image, boot.kexec, disk.wipe,
// diag.dcgm, and measured boot's tpm.enroll, tpm.activate and tpm.quote over the
// machine's TPM (hardware/tpm). docs/agent-plane.md lists the payloads.
package ramdisk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/agent/join"
	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/hardware/dcgm"
	"github.com/better-compute/better-compute/hardware/inventory"
	"github.com/better-compute/better-compute/hardware/tpm"
	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/ramdisk/deploy"
	"github.com/better-compute/better-compute/ramdisk/disk"
	"github.com/better-compute/better-compute/ramdisk/firstboot"
	"github.com/better-compute/better-compute/ramdisk/gpt"
	"github.com/better-compute/better-compute/ramdisk/kexec"
	"github.com/better-compute/better-compute/ramdisk/mount"
	"github.com/better-compute/better-compute/ramdisk/wipe"
)

// Options are what `bcd ramdisk` runs with.
type Options struct {
	// Cmdline is the file holding the kernel command line: /proc/cmdline.
	Cmdline string
	// ConfigDir is where the join writes (a tmpfs: /run/bcd).
	ConfigDir string
	// SysRoot is where sysfs and procfs are read from for the inventory: "/".
	SysRoot string
	// Disk is the disk deploy.image writes; "" takes the machine's largest disk. Given,
	// it is also the only disk disk.wipe wipes (every disk of the machine otherwise).
	Disk string
	// BootCommand, if set, is run with the disk's path instead of kexec, once the
	// registry has boot.kexec's answer: for machines (and tests) that cannot kexec.
	BootCommand string
	// Log receives the agent's structured logs.
	Log *slog.Logger
	// Clock is the agent's one clock: its session's (reconnects, keep-alive, renewal,
	// the time in signed results), its join's retries and deploy.image's progress
	// reports. clock.Real when nil.
	Clock clock.Clock
}

// progressEvery is how often deploy.image reports its progress.
const progressEvery = time.Second

// Run joins and serves the registry until ctx ends or boot.kexec hands the machine to
// the written OS.
func Run(ctx context.Context, o Options) error {
	raw, err := os.ReadFile(o.Cmdline)
	if err != nil {
		return proto.Errorf(proto.InvalidConfig, "kernel command line: %v", err)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	boot, err := ParseCmdline(string(raw))
	if err != nil {
		return proto.Errorf(proto.InvalidConfig, "%v", err)
	}
	hw, err := o.inventory().Read(ctx)
	if err != nil {
		return err
	}
	only := o.Disk
	if o.Disk == "" {
		if o.Disk, err = largestDisk(hw.Disks); err != nil {
			return err
		}
	}
	if err := joinRegistry(ctx, o.ConfigDir, boot, o.Clock, o.Log); err != nil {
		return err
	}
	creds, err := bcdconf.LoadAgent(o.ConfigDir)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	a := &agent{opts: o, node: boot.Node, stop: stop, only: only}
	a.session, err = session.New(session.Config{
		Addrs: creds.Config.Endpoints(), Certificate: creds.Certificate, ServerCAs: creds.ServingCAs, Clock: o.Clock,
		Inventory: inventory.Sections(hw), BootID: session.ReadBootID(o.SysRoot, o.Log), Log: o.Log, Handlers: a.handlers(tpm.Open),
	})
	if err != nil {
		return err
	}
	a.session.Run(ctx)
	a.mu.Lock()
	next := a.next
	a.mu.Unlock()
	if next == nil {
		return nil
	}
	return next()
}

// joinedTokenFile, in the ramdisk's config dir, holds the SHA-256 (hex) of the join
// token the kept join was made with, never the token: a ramdisk booted with another
// token joins anew instead of using a join that token did not make.
const joinedTokenFile = "joined-token.sha256"

// joinRegistry joins as boot.Node's ramdisk with the token of this boot, unless the
// config dir holds a join made with that token already (bcd ramdisk restarted: the token
// is spent). A kept join of another token, or of no recorded one, is forgotten first.
// The join's waits on a registry that refused it for now are logged to log.
func joinRegistry(ctx context.Context, dir string, boot Boot, clk clock.Clock, log *slog.Logger) error {
	sum := sha256.Sum256([]byte(boot.Token))
	record := []byte(hex.EncodeToString(sum[:]) + "\n")
	recordFile := filepath.Join(dir, joinedTokenFile)
	if c, err := bcdconf.Load(dir); err == nil && c.NodeID == boot.Node && c.Role == joinwire.RoleRamdisk && c.Server == boot.Registry {
		if kept, err := os.ReadFile(recordFile); err == nil && bytes.Equal(kept, record) {
			return nil
		}
	}
	// config.toml goes first: whatever stops this join, no later start finds a kept
	// join beside this boot's token.
	for _, name := range []string{bcdargv.ConfigFile, bcdconf.KeyFile, bcdconf.CertFile} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return proto.Errorf(proto.InvalidConfig, "forgetting the join kept in %s, made with another token: %v", dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(recordFile, record, 0o600); err != nil {
		return err
	}
	tokenFile := filepath.Join(dir, "join-token")
	if err := os.WriteFile(tokenFile, []byte(boot.Token+"\n"), 0o600); err != nil {
		return err
	}
	_, err := join.Join(ctx, join.Options{Server: boot.Registry, TokenFile: tokenFile, NodeID: boot.Node,
		Role: joinwire.RoleRamdisk, Pins: boot.Pins, ConfigDir: dir, Clock: clk, Log: log})
	return err
}

// agent is the ramdisk's command handlers.
type agent struct {
	opts    Options
	node    string
	session *session.Agent
	stop    context.CancelFunc
	// only is the --disk given: the one disk disk.wipe wipes.
	only string

	mu   sync.Mutex
	next func() error // what runs once the session ended for boot.kexec
}

// handlers are the ramdisk's relayed commands by kind, the TPM's opened by open: the
// kinds the registry relays to the ramdisk role (proto.RelayRoles).
func (a *agent) handlers(open func() (*tpm.TPM, error)) map[string]session.Handler {
	handlers := map[string]session.Handler{
		proto.CommandInventoryRefresh: a.inventoryRefresh,
		proto.CommandDeployImage:      a.deployImage,
		proto.CommandBootKexec:        a.kexec,
		proto.CommandDiskWipe:         a.wipe,
		proto.CommandDiagDCGM:         dcgm.Runner{Root: a.opts.SysRoot, Log: a.opts.Log, Sign: session.SignResult}.Command,
	}
	maps.Copy(handlers, tpmHandlers(open))
	return handlers
}

// inventoryRefresh reads the hardware, refuses a machine that is not the one enrolled,
// and reports every section.
func (a *agent) inventoryRefresh(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
	return a.opts.inventory().Command(ctx, payload, a.session.SetInventory)
}

// inventory reads the machine under SysRoot, each disk disk.wipe covers with what its
// firmware says it can erase.
func (o Options) inventory() inventory.Reader {
	return inventory.Reader{Root: o.SysRoot, Log: o.Log, Enrich: func(hw *proto.HardwareInventory) {
		disks, _ := wipe.Select(o.SysRoot, filepath.Join(o.SysRoot, "dev"), hw.Disks)
		for _, d := range disks {
			for i := range hw.Disks {
				if hw.Disks[i].Name == d.Name {
					hw.Disks[i].Erase.Firmware = wipe.Firmware(d)
				}
			}
		}
	}}
}

// deployImage writes the image, with the user data and this agent's pinned files for
// the installed bcd, reporting progress about once a second.
func (a *agent) deployImage(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
	var in proto.DeployImage
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, proto.Errorf(proto.InvalidInput, "deploy.image: %v", err)
	}
	files := firstboot.Files{UserData: in.UserData, Kind: in.UserDataKind, InstanceID: a.node}
	if len(in.UserData) > 0 {
		var err error
		if files.Config, err = os.ReadFile(filepath.Join(a.opts.ConfigDir, bcdargv.ConfigFile)); err != nil {
			return nil, err
		}
		if files.JoinEncryptionKey, err = os.ReadFile(filepath.Join(a.opts.ConfigDir, bcdargv.JoinEncryptionFile)); err != nil {
			return nil, err
		}
	}
	res, err := deploy.Image(ctx, deploy.Input{CacheURL: in.CacheURL, SourceURL: in.Source, ImageSources: in.ImageSources, Digest: in.SHA256,
		Format: proto.ImageFormat(in.Format), Compression: proto.Compression(in.Compression), SizeBytes: in.SizeBytes,
		Target: a.opts.Disk, FirstBoot: files,
	}, deploy.Options{Log: a.opts.Log, Progress: progressReporter(a.opts.Clock, func(p proto.DeployImageProgress) { session.ReportProgress(ctx, p) })})
	if err != nil {
		return nil, err
	}
	return proto.Marshal(proto.DeployImageResult{SHA256: res.Digest, BytesWritten: res.Written})
}

// progressReporter is deploy.image's progress: report is given the first progress and
// then one about every progressEvery on clk.
func progressReporter(clk clock.Clock, report func(proto.DeployImageProgress)) func(deploy.Progress) {
	var last time.Time
	return func(p deploy.Progress) {
		if now := clk.Now(); last.IsZero() || now.Sub(last) >= progressEvery {
			last = now
			report(proto.DeployImageProgress{Location: p.Location, Read: p.Read, SizeBytes: max(p.Total, 0), BytesWritten: p.Written, Skipped: p.Skipped})
		}
	}
}

// kexec loads the written OS's kernel and answers; once the registry has the answer,
// the session ends and the machine boots the written OS.
func (a *agent) kexec(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
	next := kexec.Reboot
	if a.opts.BootCommand != "" {
		next = func() error {
			cmd := exec.Command(a.opts.BootCommand, a.opts.Disk)
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			return cmd.Run()
		}
	} else if err := a.loadKernel(); err != nil {
		return nil, proto.Errorf(proto.DriverError, "boot.kexec: %v", err)
	}
	session.AfterReply(ctx, func() {
		a.mu.Lock()
		a.next = next
		a.mu.Unlock()
		a.stop()
	})
	return proto.Marshal(proto.BootKexecResult{})
}

// loadKernel finds the kernel of the OS on the disk and loads it for kexec.
func (a *agent) loadKernel() error {
	t, err := disk.Open(a.opts.Disk)
	if err != nil {
		return err
	}
	defer t.Close()
	sector, err := t.SectorSize()
	if err != nil {
		return err
	}
	parts, err := gpt.Read(t.File(), sector)
	if err != nil {
		return err
	}
	root, ok := gpt.Root(parts)
	if !ok {
		return fmt.Errorf("the written disk has no root partition")
	}
	m, err := mount.Partition(t.File(), root.Offset, root.Size)
	if err != nil {
		return err
	}
	b, err := kexec.Find(m.Dir, "", root.UUID)
	if err == nil {
		err = kexec.Load(b)
	}
	if uerr := m.Unmount(); err == nil {
		err = uerr
	}
	return err
}

// wipe is disk.wipe: every disk of the machine (ramdisk/wipe picks them, or only the
// --disk given) wiped in the mode asked, each read back, the result signed with the
// agent's key. Progress is the percent done per disk.
func (a *agent) wipe(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
	var in proto.DiskWipe
	if len(payload) > 0 {
		if err := (jsondoc.Decoder{Name: "disk.wipe's input"}).Decode(payload, &in); err != nil {
			return nil, err
		}
	}
	if in.Mode == "" {
		in.Mode = proto.WipeQuick
	}
	if !slices.Contains(proto.WipeModes, in.Mode) {
		return nil, proto.Errorf(proto.InvalidInput, "disk.wipe mode %q: use one of %s", in.Mode, strings.Join(proto.WipeModes, ", ")).WithPath("mode")
	}
	res := proto.DiskWipeResult{Mode: in.Mode, Disks: []proto.WipedDisk{}}
	if in.Mode != proto.WipeNone {
		disks, skipped, err := a.wipeDisks()
		if err != nil {
			return nil, err
		}
		res = wipe.Run(ctx, disks, wipe.Options{Mode: in.Mode, Progress: func(p proto.WipeProgress) { session.ReportProgress(ctx, p) }})
		res.Skipped = skipped
		for _, d := range res.Disks {
			a.opts.Log.Info(proto.CommandDiskWipe, "mode", in.Mode, "disk", d.Name, "method", d.Method, "wiped", d.Wiped, "unwiped", d.Unwiped, "duration", d.Duration)
		}
	}
	return session.SignResult(ctx, proto.CommandDiskWipe, res)
}

// wipeDisks are the disks disk.wipe covers: the --disk given alone, else every disk of
// the inventory ramdisk/wipe keeps, named under SysRoot's dev/.
func (a *agent) wipeDisks() ([]wipe.Disk, []proto.SkippedDisk, error) {
	if a.only != "" {
		return []wipe.Disk{{DiskInfo: proto.DiskInfo{Name: filepath.Base(a.only)}, Path: a.only}}, nil, nil
	}
	hw, err := inventory.Read(a.opts.SysRoot)
	if err != nil {
		return nil, nil, err
	}
	disks, skipped := wipe.Select(a.opts.SysRoot, filepath.Join(a.opts.SysRoot, "dev"), hw.Disks)
	return disks, skipped, nil
}

// largestDisk is the device of the largest disk.
func largestDisk(disks []proto.DiskInfo) (string, error) {
	var best proto.DiskInfo
	for _, d := range disks {
		if d.SizeBytes > best.SizeBytes {
			best = d
		}
	}
	if best.Name == "" {
		return "", proto.Errorf(proto.DriverError, "the machine has no disk to deploy to")
	}
	return "/dev/" + best.Name, nil
}
