package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

var inventoryCommands = []command{{
	path:    "nodes inventory",
	usage:   "ID [--tenant T]",
	summary: "show a node's hardware as its agents report it: system and BIOS, CPUs, memory, disks, NICs, GPUs",
	long: "the node's hardware as its ramdisk and `bcd node` report it: system and BIOS, CPUs, " +
		"memory, disks (transport, discard, firmware erases, capacity the device hides from a wipe), NICs (PCI address, link, speed), " +
		"NVIDIA GPUs (name, memory, driver, NVLinks where nvidia-smi runs); `--format json` prints " +
		"every section with when it was reported (docs/nodes.md)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		return func(x *exec) error {
			var out api.NodeInventory
			if err := x.call("metal.inventory", api.NodeKey{TenantID: *tenant, NodeID: x.args[0]}, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { inventoryDetail(w, out) })
			return nil
		}
	},
}}

// inventoryDetail prints the hardware sections; a section the agents never reported is
// left out, one that does not read as its kind is shown as it was sent.
func inventoryDetail(w *tabwriter.Writer, inv api.NodeInventory) {
	if len(inv.Sections) == 0 {
		fmt.Fprintf(w, "node %s: its agents have reported no inventory yet (inventory.refresh asks them)\n", inv.NodeID)
		return
	}
	var hw proto.HardwareInventory
	var updated time.Time
	decoded := map[string]bool{}
	for _, s := range inv.Sections {
		var target any
		switch s.Section {
		case proto.SectionSystem:
			target = &hw.System
		case proto.SectionCPU:
			target = &hw.CPU
		case proto.SectionMemory:
			target = &hw.Memory
		case proto.SectionDisks:
			target = &hw.Disks
		case proto.SectionNICs:
			target = &hw.NICs
		case proto.SectionGPUs:
			target = &hw.GPUs
		default:
			continue
		}
		if json.Unmarshal(s.Data, target) != nil {
			fmt.Fprintf(w, "%s (unreadable)\t%s\n", s.Section, s.Data)
			continue
		}
		decoded[s.Section] = true
		if s.UpdatedAt.After(updated) {
			updated = s.UpdatedAt
		}
	}
	fmt.Fprintf(w, "node %s, hardware reported %s\n", inv.NodeID, updated.Format(time.RFC3339))
	if decoded[proto.SectionSystem] {
		s := hw.System
		fmt.Fprintf(w, "\nSYSTEM\t%s %s\n", dash(s.Vendor), dash(s.Product))
		fmt.Fprintf(w, "serial\t%s\nproduct UUID\t%s\n", dash(s.Serial), dash(s.ProductUUID))
		fmt.Fprintf(w, "BIOS\t%s\n", dash(strings.TrimSpace(strings.Join([]string{s.BIOSVendor, s.BIOSVersion, s.BIOSDate}, " "))))
	}
	if decoded[proto.SectionCPU] {
		c := hw.CPU
		fmt.Fprintf(w, "CPU\t%s: %d sockets, %d cores, %d logical CPUs\n", dash(c.Model), c.Sockets, c.Cores, c.Count)
	}
	if decoded[proto.SectionMemory] {
		fmt.Fprintf(w, "memory\t%s\n", api.BytesText(hw.Memory.TotalBytes))
	}
	if decoded[proto.SectionDisks] && len(hw.Disks) > 0 {
		fmt.Fprintln(w, "\nDISK\tSIZE\tTRANSPORT\tROTATIONAL\tDISCARD\tWRITE ZEROES\tFIRMWARE ERASE\tHIDDEN FROM WIPE\tMODEL\tSERIAL")
		for _, d := range hw.Disks {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, api.BytesText(d.SizeBytes), dash(d.Transport), yesNo(d.Rotational),
				yesNo(d.Erase.Discard), yesNo(d.Erase.WriteZeroes), firmwareEraseText(d.Erase.Firmware), hiddenFromWipeText(d.Erase.Firmware), dash(d.Model), dash(d.Serial))
		}

	}
	if decoded[proto.SectionNICs] && len(hw.NICs) > 0 {
		fmt.Fprintln(w, "\nNIC\tMAC\tDRIVER\tPCI\tLINK\tSPEED")
		for _, n := range hw.NICs {
			speed := "-"
			if n.SpeedMbps > 0 {
				speed = fmt.Sprintf("%d Mb/s", n.SpeedMbps)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.MAC, dash(n.Driver), dash(n.PCIAddress), dash(n.Link), speed)
		}
	}
	if decoded[proto.SectionGPUs] && len(hw.GPUs) > 0 {
		fmt.Fprintln(w, "\nGPU\tPCI ID\tNAME\tMEMORY\tNVLINKS\tDRIVER\tUUID")
		for _, g := range hw.GPUs {
			mem := "-"
			if g.MemoryMiB > 0 {
				mem = api.BytesText(g.MemoryMiB << 20)
			}
			fmt.Fprintf(w, "%s\t%s:%s\t%s\t%s\t%d\t%s\t%s\n", g.PCIAddress, g.Vendor, g.Device, dash(g.Name), mem, g.NVLinks, dash(g.DriverVersion), dash(g.UUID))
		}
	}
	for _, warning := range inv.Warnings {
		fmt.Fprintf(w, "\nwarning: %s\n", warning)
	}
}

// firmwareEraseText lists what a disk's firmware says it can erase: "-" when nobody
// asked, "none" when it offers nothing.
func firmwareEraseText(f *proto.FirmwareErase) string {
	if f == nil {
		return "-"
	}
	if f.Error != "" {
		return "unknown (" + f.Error + ")"
	}
	var out []string
	for _, c := range []struct {
		has  bool
		name string
	}{{f.NVMeFormat, "format"}, {f.NVMeFormatCrypto, "crypto format"}, {f.NVMeSanitizeBlock, "sanitize block"},
		{f.NVMeSanitizeCrypto, "sanitize crypto"}, {f.ATASecurityErase, "security erase"}, {f.ATACryptoScramble, "crypto scramble"},
		{f.ATAFrozen, "(frozen)"}, {f.ATALocked, "(locked)"}} {
		if c.has {
			out = append(out, c.name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// hiddenFromWipeText lists the capacity a disk's device hides from a wipe: "-" when
// nobody asked, "none" when it hides nothing.
func hiddenFromWipeText(f *proto.FirmwareErase) string {
	switch {
	case f == nil:
		return "-"
	case len(f.Hidden) == 0:
		return "none"
	}
	return proto.HiddenText(f.Hidden)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
