package wipe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// hiddenCapacity is the capacity of d's device that a wipe of its block device f does not
// reach, asked of the device before the wipe: NVMe namespaces allocated but not attached
// to the controller and NVM capacity in no namespace, or an ATA Host Protected Area. A
// device that could not be asked is one unchecked entry. Nil for a disk neither NVMe nor
// SATA.
func hiddenCapacity(d Disk, f *os.File) []proto.HiddenCapacity {
	var hidden []proto.HiddenCapacity
	var err error
	switch d.Transport {
	case "nvme":
		var dev *nvmeDevice
		if dev, err = openNVMe(f, d.Controller); err == nil {
			hidden, err = dev.hidden()
			dev.close(f)
		}
		if err != nil {
			err = fmt.Errorf("NVMe: %w", err)
		}
	case "sata":
		hidden, err = ataDevice{f}.hidden()
	}
	if err != nil {
		return []proto.HiddenCapacity{{Kind: proto.HiddenUnchecked, Error: err.Error()}}
	}
	return hidden
}

// hidden is the controller's NVM no attached namespace holds: each namespace allocated
// but not attached to it, and TNVMCAP beyond every allocated namespace. A controller
// without namespace management has every namespace it holds attached, and reports no
// TNVMCAP.
func (d *nvmeDevice) hidden() ([]proto.HiddenCapacity, error) {
	buf := make([]byte, 4096)
	if err := d.admin(nvmeAdminCmd{Opcode: nvmeOpIdentify, Cdw10: nvmeCNSController}, buf); err != nil {
		return nil, err
	}
	c, err := parseIdentifyController(buf)
	if err != nil || !c.NamespaceManagement {
		return nil, err
	}
	active, err := d.namespaces(nvmeCNSActiveList)
	if err != nil {
		return nil, err
	}
	ids, err := d.namespaces(nvmeCNSAllocatedList)
	if err != nil {
		return nil, err
	}
	allocated := make(map[uint32]NVMeNamespace, len(ids))
	for _, id := range ids {
		clear(buf)
		if err := d.admin(nvmeAdminCmd{Opcode: nvmeOpIdentify, NSID: id, Cdw10: nvmeCNSAllocated}, buf); err != nil {
			return nil, fmt.Errorf("namespace %d: %w", id, err)
		}
		if allocated[id], err = parseIdentifyNamespace(buf); err != nil {
			return nil, err
		}
	}
	return nvmeHidden(c, active, ids, allocated), nil
}

// nvmeHidden is what a controller hides from a wipe of its attached (active) namespaces,
// from its allocated namespaces (ids, in the controller's order) and their Identify
// Namespace data.
func nvmeHidden(c NVMeController, active, ids []uint32, allocated map[uint32]NVMeNamespace) []proto.HiddenCapacity {
	var out []proto.HiddenCapacity
	var used int64
	for _, id := range ids {
		ns := allocated[id]
		used += min(ns.Bytes, math.MaxInt64-used)
		if !slices.Contains(active, id) {
			out = append(out, proto.HiddenCapacity{Kind: proto.HiddenNVMeNamespace, NSID: id, Bytes: ns.Bytes})
		}
	}
	if c.TotalBytes > used {
		out = append(out, proto.HiddenCapacity{Kind: proto.HiddenNVMeUnallocated, Bytes: c.TotalBytes - used})
	}
	return out
}

// namespaces is a namespace list of Identify (cns: active or allocated), read 1024
// NSIDs at a time.
func (d *nvmeDevice) namespaces(cns uint32) ([]uint32, error) {
	var out []uint32
	buf := make([]byte, 4096)
	for after := uint32(0); ; {
		clear(buf)
		if err := d.admin(nvmeAdminCmd{Opcode: nvmeOpIdentify, NSID: after, Cdw10: cns}, buf); err != nil {
			return nil, err
		}
		page := parseNamespaceList(buf)
		out = append(out, page...)
		if len(page) < len(buf)/4 || page[len(page)-1] <= after {
			return out, nil
		}
		after = page[len(page)-1]
	}
}

// parseNamespaceList reads an Identify namespace list: NSIDs in increasing order, ended
// by a zero.
func parseNamespaceList(b []byte) []uint32 {
	var out []uint32
	for i := 0; i+4 <= len(b); i += 4 {
		id := binary.LittleEndian.Uint32(b[i:])
		if id == 0 {
			break
		}
		out = append(out, id)
	}
	return out
}

// hidden is the device's Host Protected Area: READ NATIVE MAX ADDRESS (EXT) above the
// max address IDENTIFY DEVICE shows. It is asked of every device: one that aborts it
// without claiming the HPA feature set (IDENTIFY word 82 bit 10) lacks the command, and
// SET MAX ADDRESS with it, so has no HPA; one that claims the feature set must answer.
func (d ataDevice) hidden() ([]proto.HiddenCapacity, error) {
	s, err := d.identify()
	if err != nil {
		return nil, fmt.Errorf("ATA IDENTIFY DEVICE: %w", err)
	}
	command := uint8(ataReadNativeMax)
	if s.LBA48 {
		command = ataReadNativeMaxExt
	}
	sense, err := d.command(ataCDB(ataNonData, command, 0, 0, 0), nil, false, 30*time.Second)
	if _, aborted := errors.AsType[ataAborted](err); aborted && !s.HostProtectedArea {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("READ NATIVE MAX ADDRESS: %w", err)
	}
	last, ok := ataLBA(sense, s.LBA48)
	if !ok {
		return nil, fmt.Errorf("READ NATIVE MAX ADDRESS returned no registers")
	}
	return ataHidden(s, last), nil
}

// ataHidden is the Host Protected Area of a device IDENTIFY DEVICE describes as s, whose
// native max address (its last LBA) is last.
func ataHidden(s ATASecurity, last uint64) []proto.HiddenCapacity {
	if native := last + 1; native > s.Sectors {
		return []proto.HiddenCapacity{{Kind: proto.HiddenATAHPA, Bytes: int64(native-s.Sectors) * s.SectorSize}}
	}
	return nil
}
