package agents

import (
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// put stores section of the inventory the agent of s reported, as the registry stores it
// (storedAs), and reports whether it changed (store.Tx.PutInventory).
func put(tx *store.Tx, s *session, section string, data json.RawMessage) (bool, error) {
	data, err := storedAs(tx, s, section, data)
	if err != nil {
		return false, err
	}
	return tx.PutInventory(s.node, section, data)
}

// storedAs is data, section of the inventory the agent of s reported, as the registry
// stores it: as sent, but a `disks` section of bcd node (the installed OS, whose disks
// are in use and which asks none of their firmware) keeps the firmware findings the
// stored copy has (keptFirmware). What a disk's device hides from a wipe
// (erase.firmware.hidden) is the ramdisk's finding, asked as disk.wipe asks it: kept
// until a ramdisk reports the disks again (an inspection), so that the warning of a disk
// that still hides capacity (metal.HiddenCapacityWarnings) outlives the installed OS's
// report.
func storedAs(tx *store.Tx, s *session, section string, data json.RawMessage) (json.RawMessage, error) {
	if s.role != proto.RoleNode || section != proto.SectionDisks {
		return data, nil
	}
	stored, _, err := tx.InventorySection(s.node, section)
	if err != nil {
		return nil, err
	}
	return keptFirmware(data, stored.Data)
}

// keptFirmware is data, a disks section bcd node reported, with each disk's
// erase.firmware the stored copy (stored) has of the disk of the same name and serial,
// and without one where it has none: bcd node's own is never taken, the findings being
// the ramdisk's. Data that is not a list of disks, or that this changes nothing of, is
// kept as sent.
func keptFirmware(data, stored json.RawMessage) (json.RawMessage, error) {
	var disks []map[string]json.RawMessage
	if json.Unmarshal(data, &disks) != nil {
		return data, nil
	}
	type disk struct {
		Name   string `json:"name"`
		Serial string `json:"serial"`
	}
	var was []struct {
		disk
		Erase struct {
			Firmware json.RawMessage `json:"firmware"`
		} `json:"erase"`
	}
	found := map[disk]json.RawMessage{}
	if json.Unmarshal(stored, &was) == nil {
		for _, d := range was {
			if len(d.Erase.Firmware) > 0 && string(d.Erase.Firmware) != "null" {
				found[d.disk] = d.Erase.Firmware
			}
		}
	}
	changed := false
	for _, d := range disks {
		if d == nil {
			continue
		}
		var key disk
		json.Unmarshal(d["name"], &key.Name)
		json.Unmarshal(d["serial"], &key.Serial)
		var erase map[string]json.RawMessage
		ok := json.Unmarshal(d["erase"], &erase) == nil && erase != nil
		f, kept := found[key]
		switch {
		case kept && !ok:
			erase = map[string]json.RawMessage{"firmware": f}
		case kept:
			erase["firmware"] = f
		case ok && erase["firmware"] != nil:
			delete(erase, "firmware")
		default:
			continue
		}
		var err error
		if d["erase"], err = proto.Marshal(erase); err != nil {
			return nil, err
		}
		changed = true
	}
	if !changed {
		return data, nil
	}
	return proto.Marshal(disks)
}
