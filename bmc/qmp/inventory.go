package qmp

import (
	"context"
	"fmt"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// Inspect reads what qemu knows of the VM: its UUID (-uuid), machine type, vCPUs by
// socket, memory, the MAC of the NIC (option nic), its fixed disks, and qemu's version
// as the BMC firmware.
func (d *driver) Inspect(ctx context.Context) (proto.OOBInventory, error) {
	var inv proto.OOBInventory
	err := d.session(ctx, "inspect", func(c *conn) (err error) {
		inv, err = d.inspect(c)
		return err
	})
	return inv, err
}

func (d *driver) inspect(c *conn) (proto.OOBInventory, error) {
	inv := proto.OOBInventory{System: proto.OOBSystem{Manufacturer: "QEMU"}, BMC: proto.OOBController{Model: "QEMU QMP"}}
	var err error
	if inv.PowerState, err = status(c); err != nil {
		return inv, err
	}
	var uuid struct {
		UUID string `json:"UUID"`
	}
	if err := c.execute("query-uuid", nil, &uuid); err != nil {
		return inv, err
	}
	if strings.Trim(uuid.UUID, "0-") != "" {
		inv.System.UUID = uuid.UUID
	}
	if err := c.execute("qom-get", map[string]any{"path": "/machine", "property": "type"}, &inv.System.Model); err != nil {
		return inv, err
	}
	var cpus []struct {
		Target string `json:"target"`
		Props  struct {
			Socket int `json:"socket-id"`
			Die    int `json:"die-id"`
			Core   int `json:"core-id"`
		} `json:"props"`
	}
	if err := c.execute("query-cpus-fast", nil, &cpus); err != nil {
		return inv, err
	}
	sockets := map[int]int{} // socket id -> index in inv.CPUs
	cores := map[[3]int]bool{}
	for _, cpu := range cpus {
		p := cpu.Props
		i, ok := sockets[p.Socket]
		if !ok {
			i, sockets[p.Socket] = len(inv.CPUs), len(inv.CPUs)
			inv.CPUs = append(inv.CPUs, proto.OOBCPU{Socket: fmt.Sprint(p.Socket), Model: cpu.Target})
		}
		inv.CPUs[i].Threads++
		if core := [3]int{p.Socket, p.Die, p.Core}; !cores[core] {
			cores[core] = true
			inv.CPUs[i].Cores++
		}
	}
	var mem struct {
		Base    int64 `json:"base-memory"`
		Plugged int64 `json:"plugged-memory"`
	}
	if err := c.execute("query-memory-size-summary", nil, &mem); err != nil {
		return inv, err
	}
	inv.Memory.TotalBytes = mem.Base + mem.Plugged
	if nic, err := d.option(optNIC, ""); err == nil {
		var mac string
		if err := c.execute("qom-get", map[string]any{"path": peripheral(nic), "property": "mac"}, &mac); err != nil {
			return inv, err
		}
		inv.NICs = append(inv.NICs, proto.OOBNIC{Name: nic, MAC: strings.ToLower(mac)})
	}
	devices, err := queryBlock(c)
	if err != nil {
		return inv, err
	}
	for _, b := range devices {
		if !b.Removable && b.Inserted != nil {
			inv.Storage = append(inv.Storage, proto.OOBDrive{Name: b.name(), CapacityBytes: b.Inserted.Image.VirtualSize})
		}
	}
	var version struct {
		QEMU struct {
			Major, Minor, Micro int
		} `json:"qemu"`
		Package string `json:"package"`
	}
	if err := c.execute("query-version", nil, &version); err != nil {
		return inv, err
	}
	v := version.QEMU
	inv.BMC.FirmwareVersion = strings.TrimSpace(fmt.Sprintf("%d.%d.%d %s", v.Major, v.Minor, v.Micro, version.Package))
	return inv, nil
}
