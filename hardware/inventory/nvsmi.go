package inventory

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
)

// SMIGPU is what `nvidia-smi -q -x` says of one GPU.
type SMIGPU struct {
	// PCIAddress is domain:bus:device.function as sysfs spells it, 0000:17:00.0.
	PCIAddress string
	Name       string
	UUID       string
	MemoryMiB  int64
}

// SMI is the part of `nvidia-smi -q -x` the inventory keeps.
type SMI struct {
	DriverVersion string
	GPUs          []SMIGPU
}

// ParseNvidiaSMI reads the XML of `nvidia-smi -q -x` (nvsmi_device DTD): the driver
// version and each GPU's PCI address, product name, UUID and frame-buffer memory.
func ParseNvidiaSMI(b []byte) (SMI, error) {
	var doc struct {
		XMLName xml.Name `xml:"nvidia_smi_log"`
		Driver  string   `xml:"driver_version"`
		GPUs    []struct {
			ID   string `xml:"id,attr"`
			Name string `xml:"product_name"`
			UUID string `xml:"uuid"`
			PCI  struct {
				BusID string `xml:"pci_bus_id"`
			} `xml:"pci"`
			Memory struct {
				Total string `xml:"total"`
			} `xml:"fb_memory_usage"`
		} `xml:"gpu"`
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = false // the document names a DTD the decoder has no use for
	if err := d.Decode(&doc); err != nil {
		return SMI{}, fmt.Errorf("nvidia-smi -q -x: %v", err)
	}
	out := SMI{DriverVersion: strings.TrimSpace(doc.Driver)}
	for _, g := range doc.GPUs {
		addr, ok := smiPCIAddress(g.PCI.BusID)
		if !ok {
			addr, ok = smiPCIAddress(g.ID)
		}
		if !ok {
			return SMI{}, fmt.Errorf("nvidia-smi -q -x: GPU %q has no PCI bus id", g.ID)
		}
		out.GPUs = append(out.GPUs, SMIGPU{PCIAddress: addr, Name: strings.TrimSpace(g.Name),
			UUID: strings.TrimSpace(g.UUID), MemoryMiB: mib(g.Memory.Total)})
	}
	return out, nil
}

// smiPCIAddress turns nvidia-smi's bus id (a 32-bit domain, 00000000:84:00.0) into
// sysfs's spelling (0000:84:00.0).
func smiPCIAddress(id string) (string, bool) {
	id = strings.ToLower(strings.TrimSpace(id))
	if len(id) < 12 {
		return "", false
	}
	addr := id[len(id)-12:]
	if !isPCIAddress(addr) || strings.Trim(id[:len(id)-12], "0") != "" {
		return "", false
	}
	return addr, true
}

// mib reads "81559 MiB"; 0 when it is not that.
func mib(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "MiB")), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// ParseNVLinkStatus reads `nvidia-smi nvlink --status`: a "GPU i: NAME (UUID: GPU-...)"
// line per GPU, then a "Link k: 26.562 GB/s" line per link, "Link k: <inactive>" for a
// link that is down. It returns the active links by GPU UUID.
func ParseNVLinkStatus(b []byte) (map[string]int, error) {
	out := map[string]int{}
	var uuid string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case strings.HasPrefix(line, "GPU "):
			_, rest, ok := strings.Cut(line, "(UUID: ")
			id, _, closed := strings.Cut(rest, ")")
			if id = strings.TrimSpace(id); !ok || !closed || id == "" {
				return nil, fmt.Errorf("nvidia-smi nvlink --status: %q names no GPU UUID", line)
			}
			uuid = id
			out[uuid] += 0
		case strings.HasPrefix(line, "Link "):
			if uuid == "" {
				return nil, fmt.Errorf("nvidia-smi nvlink --status: %q before any GPU", line)
			}
			_, state, ok := strings.Cut(line, ":")
			if !ok {
				return nil, fmt.Errorf("nvidia-smi nvlink --status: %q", line)
			}
			if state = strings.TrimSpace(state); state != "" && !strings.Contains(strings.ToLower(state), "inactive") {
				out[uuid]++
			}
		default:
			return nil, fmt.Errorf("nvidia-smi nvlink --status: unexpected line %q", line)
		}
	}
	return out, sc.Err()
}
