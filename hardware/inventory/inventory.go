// Package inventory reads the hardware sections `bcd ramdisk` and `bcd node` report for
// inventory.refresh (system, NICs, disks, CPU, memory, GPUs) from sysfs and procfs,
// under a root that tests point at a tree of their own, and what nvidia-smi says of
// the GPUs where it runs. Both agents answer inventory.refresh with Reader.Command.
package inventory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Reader reads a machine's inventory.
type Reader struct {
	// Root is where sysfs and procfs are: "/" on a machine.
	Root string
	// NvidiaSMI is the nvidia-smi program, looked up in PATH; "nvidia-smi" when empty.
	NvidiaSMI string
	// Log receives why nvidia-smi said nothing.
	Log *slog.Logger
	// Enrich, if set, adds what the agent knows beyond sysfs to each inventory read (the
	// ramdisk: each disk's firmware erase capabilities).
	Enrich func(*proto.HardwareInventory)
}

// smiTimeout bounds one nvidia-smi run.
const smiTimeout = time.Minute

// maxSMIOutput bounds what is kept of one nvidia-smi run: `nvidia-smi -q -x` prints
// about 12 KiB a GPU, so 8 GPUs print about 100 KiB.
const maxSMIOutput = 16 << 20

// Read reads every section under the root and, when the machine has NVIDIA GPUs and
// nvidia-smi runs, adds each GPU's name, UUID, driver version, memory and active
// NVLinks. nvidia-smi failing (no driver loaded, as on a ramdisk without one) leaves
// those fields empty.
func (r Reader) Read(ctx context.Context) (proto.HardwareInventory, error) {
	hw, err := Read(cmp.Or(r.Root, "/"))
	if err != nil {
		return hw, err
	}
	if r.Enrich != nil {
		r.Enrich(&hw)
	}
	if len(hw.GPUs) == 0 {
		return hw, nil
	}
	smi, err := r.smi(ctx, "-q", "-x")
	if err != nil {
		r.log().Info("nvidia-smi gave no GPU details", "err", err)
		return hw, nil
	}
	parsed, err := ParseNvidiaSMI(smi)
	if err != nil {
		r.log().Warn("nvidia-smi", "err", err)
		return hw, nil
	}
	links := map[string]int{}
	if out, err := r.smi(ctx, "nvlink", "--status"); err == nil {
		if links, err = ParseNVLinkStatus(out); err != nil {
			r.log().Warn("nvidia-smi nvlink", "err", err)
		}
	}
	MergeSMI(hw.GPUs, parsed, links)
	return hw, nil
}

// MergeSMI adds what nvidia-smi said to the GPUs found on PCI, by PCI address, and
// each GPU's active NVLinks by UUID.
func MergeSMI(gpus []proto.GPUInfo, smi SMI, nvlinks map[string]int) {
	for i := range gpus {
		for _, s := range smi.GPUs {
			if s.PCIAddress == gpus[i].PCIAddress {
				g := &gpus[i]
				g.Name, g.UUID, g.MemoryMiB, g.DriverVersion = s.Name, s.UUID, s.MemoryMiB, smi.DriverVersion
				g.NVLinks = nvlinks[s.UUID]
			}
		}
	}
}

// smi runs nvidia-smi with args and returns what it printed, at most maxSMIOutput:
// nvidia-smi and the driver are the machine's, and one that prints without end stops
// at the limit rather than growing the agent until smiTimeout.
func (r Reader) smi(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, smiTimeout)
	defer cancel()
	var out capped
	cmd := exec.CommandContext(ctx, cmp.Or(r.NvidiaSMI, "nvidia-smi"), args...)
	cmd.Stdout = &out
	err := cmd.Run()
	if out.over {
		return nil, fmt.Errorf("nvidia-smi %s printed more than %d bytes: stopped", strings.Join(args, " "), maxSMIOutput)
	}
	if err != nil {
		return nil, err
	}
	return out.buf.Bytes(), nil
}

// capped keeps what a program prints up to maxSMIOutput and refuses more: the pipe is
// then closed, so the program's next write fails. The buffer is a field, not embedded:
// its ReadFrom would let io.Copy read past Write.
type capped struct {
	buf  bytes.Buffer
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if c.buf.Len()+len(p) > maxSMIOutput {
		c.over = true
		return 0, fmt.Errorf("more than %d bytes", maxSMIOutput)
	}
	return c.buf.Write(p)
}

func (r Reader) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

// Command is inventory.refresh's handler: it reads the inventory, refuses a machine
// that is not the one the registry enrolled (payload is a proto.InventoryRefresh),
// reports every section with report and answers the whole inventory.
func (r Reader) Command(ctx context.Context, payload json.RawMessage, report func(section string, data json.RawMessage)) (json.RawMessage, error) {
	var want proto.InventoryRefresh
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &want); err != nil {
			return nil, proto.Errorf(proto.InvalidInput, "inventory.refresh: %v", err)
		}
	}
	hw, err := r.Read(ctx)
	if err != nil {
		return nil, err
	}
	if err := proto.CheckIdentity(proto.Identity{ProductUUID: want.ProductUUID, MAC: want.MAC}, hw.System, hw.NICs); err != nil {
		return nil, err
	}
	for name, data := range Sections(hw) {
		report(name, data)
	}
	return proto.Marshal(hw)
}

// Sections are the hardware inventory's sections by name, as an agent reports them.
func Sections(hw proto.HardwareInventory) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for name, v := range map[string]any{proto.SectionSystem: hw.System, proto.SectionNICs: hw.NICs, proto.SectionDisks: hw.Disks,
		proto.SectionCPU: hw.CPU, proto.SectionMemory: hw.Memory, proto.SectionGPUs: hw.GPUs} {
		if b, err := proto.Marshal(v); err == nil {
			out[name] = b
		}
	}
	return out
}

// Read reads every section under root ("/" on a machine). A file that is missing or
// unreadable leaves its field empty: firmware and drivers differ in what they expose.
func Read(root string) (proto.HardwareInventory, error) {
	nics, err := NICs(root)
	if err != nil {
		return proto.HardwareInventory{}, err
	}
	disks, err := Disks(root)
	if err != nil {
		return proto.HardwareInventory{}, err
	}
	cpu, err := CPU(root)
	if err != nil {
		return proto.HardwareInventory{}, err
	}
	mem, err := Memory(root)
	if err != nil {
		return proto.HardwareInventory{}, err
	}
	gpus, err := GPUs(root)
	if err != nil {
		return proto.HardwareInventory{}, err
	}
	return proto.HardwareInventory{System: System(root), NICs: nics, Disks: disks, CPU: cpu, Memory: mem, GPUs: gpus}, nil
}

// text is a sysfs attribute's value without surrounding space; empty when absent.
func text(path ...string) string {
	b, err := os.ReadFile(filepath.Join(path...))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// number is a sysfs attribute as a whole number; 0 when absent, negative or not a
// number.
func number(path ...string) int64 {
	v, err := strconv.ParseInt(text(path...), 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// entries lists a sysfs class directory's entries, sorted; none when it is missing.
func entries(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(des))
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names, nil
}

// devices lists the entries of a sysfs class directory that a device backs (they have a
// device link; virtual ones have none), sorted; none when the directory is missing.
func devices(dir string) ([]string, error) {
	names, err := entries(dir)
	return slices.DeleteFunc(names, func(name string) bool { return !exists(dir, name, "device") }), err
}

// exists reports whether path exists (a symlink counts as itself).
func exists(path ...string) bool {
	_, err := os.Lstat(filepath.Join(path...))
	return err == nil
}
