package bmc

import (
	"context"

	"github.com/better-compute/better-compute/proto"
)

// Inspection reads a machine's hardware inventory out of band, for inspect.oob.
type Inspection interface {
	// Inspect returns what the BMC knows of the machine. Fields the BMC does not report
	// are left empty; a part the BMC links but fails to serve is named in Unread, and
	// the rest is returned all the same.
	Inspect(ctx context.Context) (Inventory, error)
}

// Inventory is a machine as its BMC describes it.
type Inventory struct {
	System     System           `json:"system"`
	PowerState proto.PowerState `json:"powerState"`
	CPUs       []CPU            `json:"cpus"`
	Memory     Memory           `json:"memory"`
	NICs       []NIC            `json:"nics"`
	Storage    []Drive          `json:"storage"`
	BMC        Controller       `json:"bmc"`
	// Unread are the parts the BMC links but could not be read, each with the reason.
	Unread []Unread `json:"unread,omitempty"`
}

// Unread is a part of the inventory the BMC did not give.
type Unread struct {
	// Part is the inventory's field: cpus, memory, nics, storage or bmc.
	Part string `json:"part"`
	// Error is what went wrong, in the driver's words.
	Error string `json:"error"`
}

// System identifies the machine.
type System struct {
	Manufacturer string `json:"manufacturer,omitempty"`
	Model        string `json:"model,omitempty"`
	SerialNumber string `json:"serialNumber,omitempty"`
	// UUID is the SMBIOS product UUID, as the BMC spells it.
	UUID        string `json:"uuid,omitempty"`
	BIOSVersion string `json:"biosVersion,omitempty"`
}

// CPU is one processor socket.
type CPU struct {
	Socket       string `json:"socket,omitempty"`
	Manufacturer string `json:"manufacturer,omitempty"`
	Model        string `json:"model,omitempty"`
	Cores        int    `json:"cores,omitempty"`
	Threads      int    `json:"threads,omitempty"`
	MaxSpeedMHz  int    `json:"maxSpeedMHz,omitempty"`
}

// Memory is the machine's memory: its total and, where the BMC lists them, its modules.
type Memory struct {
	TotalBytes int64          `json:"totalBytes"`
	Modules    []MemoryModule `json:"modules,omitempty"`
}

// MemoryModule is one DIMM.
type MemoryModule struct {
	Locator       string `json:"locator,omitempty"`
	CapacityBytes int64  `json:"capacityBytes"`
	Type          string `json:"type,omitempty"`
	SpeedMHz      int    `json:"speedMHz,omitempty"`
}

// NIC is one of the machine's network interfaces.
type NIC struct {
	Name string `json:"name,omitempty"`
	// MAC is lower-case, colon-separated.
	MAC       string `json:"mac"`
	SpeedMbps int    `json:"speedMbps,omitempty"`
}

// Drive is one storage device.
type Drive struct {
	Name          string `json:"name,omitempty"`
	Model         string `json:"model,omitempty"`
	SerialNumber  string `json:"serialNumber,omitempty"`
	CapacityBytes int64  `json:"capacityBytes,omitempty"`
	// MediaType is HDD, SSD or the BMC's own word for it.
	MediaType string `json:"mediaType,omitempty"`
	Protocol  string `json:"protocol,omitempty"`
}

// Controller is the BMC itself.
type Controller struct {
	Model           string `json:"model,omitempty"`
	FirmwareVersion string `json:"firmwareVersion,omitempty"`
}
