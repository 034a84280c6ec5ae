package proto

// The result of inspect.oob: what the machine's BMC says of it, read by a site agent's
// BMC driver and recorded by the registry (the MACs of its NICs, against which a MAC
// PXE discovery proposes is checked).

// OOBInventory is the result of inspect.oob: a machine as its BMC describes it.
type OOBInventory struct {
	System     OOBSystem     `json:"system"`
	PowerState PowerState    `json:"powerState"`
	CPUs       []OOBCPU      `json:"cpus"`
	Memory     OOBMemory     `json:"memory"`
	NICs       []OOBNIC      `json:"nics"`
	Storage    []OOBDrive    `json:"storage"`
	BMC        OOBController `json:"bmc"`
	// Unread are the parts the BMC links but could not be read, each with the reason.
	Unread []OOBUnread `json:"unread,omitempty"`
}

// OOBUnread is a part of the inventory the BMC did not give.
type OOBUnread struct {
	// Part is the inventory's field: cpus, memory, nics, storage or bmc.
	Part string `json:"part"`
	// Error is what went wrong, in the driver's words.
	Error string `json:"error"`
}

// OOBSystem identifies the machine.
type OOBSystem struct {
	Manufacturer string `json:"manufacturer,omitempty"`
	Model        string `json:"model,omitempty"`
	SerialNumber string `json:"serialNumber,omitempty"`
	// UUID is the SMBIOS product UUID, as the BMC spells it.
	UUID        string `json:"uuid,omitempty"`
	BIOSVersion string `json:"biosVersion,omitempty"`
}

// OOBCPU is one processor socket.
type OOBCPU struct {
	Socket       string `json:"socket,omitempty"`
	Manufacturer string `json:"manufacturer,omitempty"`
	Model        string `json:"model,omitempty"`
	Cores        int    `json:"cores,omitempty"`
	Threads      int    `json:"threads,omitempty"`
	MaxSpeedMHz  int    `json:"maxSpeedMHz,omitempty"`
}

// OOBMemory is the machine's memory: its total and, where the BMC lists them, its modules.
type OOBMemory struct {
	TotalBytes int64             `json:"totalBytes"`
	Modules    []OOBMemoryModule `json:"modules,omitempty"`
}

// OOBMemoryModule is one DIMM.
type OOBMemoryModule struct {
	Locator       string `json:"locator,omitempty"`
	CapacityBytes int64  `json:"capacityBytes"`
	Type          string `json:"type,omitempty"`
	SpeedMHz      int    `json:"speedMHz,omitempty"`
}

// OOBNIC is one of the machine's network interfaces.
type OOBNIC struct {
	Name string `json:"name,omitempty"`
	// MAC is lower-case, colon-separated.
	MAC       string `json:"mac"`
	SpeedMbps int    `json:"speedMbps,omitempty"`
}

// OOBDrive is one storage device.
type OOBDrive struct {
	Name          string `json:"name,omitempty"`
	Model         string `json:"model,omitempty"`
	SerialNumber  string `json:"serialNumber,omitempty"`
	CapacityBytes int64  `json:"capacityBytes,omitempty"`
	// MediaType is HDD, SSD or the BMC's own word for it.
	MediaType string `json:"mediaType,omitempty"`
	Protocol  string `json:"protocol,omitempty"`
}

// OOBController is the BMC itself.
type OOBController struct {
	Model           string `json:"model,omitempty"`
	FirmwareVersion string `json:"firmwareVersion,omitempty"`
}
