package qmp

import (
	"cmp"
	"context"
	"slices"

	"github.com/better-compute/better-compute/proto"
)

// The boot order is the managed devices' bootindex properties, which qemu lets a client
// change at run time and hands the firmware at each reset (the guest's own resets too:
// SeaBIOS resets the machine once more when it starts after a warm reset). The
// persistent order gives the devices 10, 20 and 30. A one-time device gets its
// persistent rank alone (1, 2 or 3), which puts it first and records in qemu itself
// where it goes back to. The driver's next power-on marks it used (rank+5: still first,
// through the firmware's own resets), and the power-on after that, or any
// SetBootDevice, gives it rank×10 again. A reboot the guest makes by itself boots the
// one-time device again; the site's boot server then sends it on to its disk.
const (
	rankStep = 10
	usedStep = 5
)

// persistentIndex returns the persistent index a bootindex stands for.
func persistentIndex(i int) int {
	switch {
	case i > 0 && i < usedStep:
		return i * rankStep
	case i > usedStep && i < rankStep:
		return (i - usedStep) * rankStep
	}
	return i
}

func peripheral(id string) string { return "/machine/peripheral/" + id }

func bootIndex(c *conn, id string) (int, error) {
	var i int
	err := c.execute("qom-get", map[string]any{"path": peripheral(id), "property": "bootindex"}, &i)
	return i, err
}

func setBootIndex(c *conn, id string, i int) error {
	return c.execute("qom-set", map[string]any{"path": peripheral(id), "property": "bootindex", "value": i}, nil)
}

// bootOptions maps each boot device to the option naming the device behind it. qemu's
// NIC ROM (iPXE) boots over PXE or HTTP as the DHCP answer says, so both are the NIC.
var bootOptions = map[proto.BootDevice]string{
	proto.BootDevicePXE:  optNIC,
	proto.BootDeviceHTTP: optNIC,
	proto.BootDeviceDisk: optDisk,
	proto.BootDeviceCD:   optCD,
}

// SetBootDevice rewrites the managed devices' bootindex: the device first in the
// persistent order, or first at the next reset only.
func (d *driver) SetBootDevice(ctx context.Context, device proto.BootDevice, persistent bool) error {
	opt, ok := bootOptions[device]
	if !ok {
		_, err := proto.ParseBootDevice(string(device))
		return err
	}
	target, err := d.option(opt, "device to boot "+string(device)+" from")
	if err != nil {
		return err
	}
	return d.session(ctx, "set boot device", func(c *conn) error {
		order, err := d.persistentOrder(c)
		if err != nil {
			return err
		}
		if persistent {
			order = append([]string{target}, slices.DeleteFunc(order, func(id string) bool { return id == target })...)
		}
		// Unset every index first: qemu refuses an index another device holds.
		for _, id := range order {
			if err := setBootIndex(c, id, -1); err != nil {
				return err
			}
		}
		for rank, id := range order {
			i := (rank + 1) * rankStep
			if id == target && !persistent {
				i = rank + 1
			}
			if err := setBootIndex(c, id, i); err != nil {
				return err
			}
		}
		d.log.Info("boot order", "order", order, "first", target, "persistent", persistent)
		return nil
	})
}

// persistentOrder reads the managed devices' persistent order: by persistent index,
// devices without one last.
func (d *driver) persistentOrder(c *conn) ([]string, error) {
	type entry struct {
		id  string
		key int
	}
	var entries []entry
	for _, dev := range d.devices {
		i, err := bootIndex(c, dev.id)
		if err != nil {
			return nil, err
		}
		if i = persistentIndex(i); i < 0 {
			i = 1 << 30
		}
		entries = append(entries, entry{dev.id, i})
	}
	slices.SortStableFunc(entries, func(a, b entry) int { return cmp.Compare(a.key, b.key) })
	order := make([]string, len(entries))
	for i, e := range entries {
		order[i] = e.id
	}
	return order, nil
}

// nextBoot is called before each reset that boots the VM: a used one-time device gets
// its persistent index back, a pending one is marked used.
func (d *driver) nextBoot(c *conn) error {
	for _, dev := range d.devices {
		i, err := bootIndex(c, dev.id)
		if err != nil {
			return err
		}
		next := i
		switch {
		case i > 0 && i < usedStep:
			next = i + usedStep
		case i > usedStep && i < rankStep:
			next = persistentIndex(i)
		}
		if next != i {
			d.log.Info("one-time boot device", "device", dev.id, "bootindex", next)
			if err := setBootIndex(c, dev.id, next); err != nil {
				return err
			}
		}
	}
	return nil
}
