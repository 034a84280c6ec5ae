package proto

// The hardware inventory sections a ramdisk reports (inventory.refresh), each under its
// name in the agent's inventory.
const (
	SectionSystem = "system"
	SectionNICs   = "nics"
	SectionDisks  = "disks"
	SectionCPU    = "cpu"
	SectionMemory = "memory"
	SectionGPUs   = "gpus"
)

// HardwareInventory is every hardware section at once.
type HardwareInventory struct {
	System SystemInfo `json:"system"`
	NICs   []NICInfo  `json:"nics"`
	Disks  []DiskInfo `json:"disks"`
	CPU    CPUInfo    `json:"cpu"`
	Memory MemoryInfo `json:"memory"`
	GPUs   []GPUInfo  `json:"gpus"`
}

// SystemInfo is the `system` section: the machine as its firmware names it (SMBIOS).
type SystemInfo struct {
	// ProductUUID is the SMBIOS system UUID as the kernel reports it; empty when the
	// firmware gives none.
	ProductUUID string `json:"productUuid,omitempty"`
	Vendor      string `json:"vendor,omitempty"`
	Product     string `json:"product,omitempty"`
	Serial      string `json:"serial,omitempty"`
}

// NICInfo is one physical network interface in the `nics` section.
type NICInfo struct {
	Name string `json:"name"`
	// MAC is lower-case, colon-separated.
	MAC    string `json:"mac"`
	Driver string `json:"driver,omitempty"`
	// SpeedMbps is the negotiated speed; 0 when the link is down or unknown.
	SpeedMbps int `json:"speedMbps,omitempty"`
}

// DiskInfo is one disk in the `disks` section.
type DiskInfo struct {
	// Name is the kernel's name, for example nvme0n1; the device is /dev/<name>.
	Name       string `json:"name"`
	SizeBytes  int64  `json:"sizeBytes"`
	Rotational bool   `json:"rotational"`
	Model      string `json:"model,omitempty"`
	Serial     string `json:"serial,omitempty"`
}

// CPUInfo is the `cpu` section.
type CPUInfo struct {
	Model string `json:"model,omitempty"`
	// Count is the number of logical CPUs.
	Count int `json:"count"`
}

// MemoryInfo is the `memory` section.
type MemoryInfo struct {
	TotalBytes int64 `json:"totalBytes"`
}

// GPUInfo is one GPU in the `gpus` section: an NVIDIA PCI function of display class.
type GPUInfo struct {
	// PCIAddress is domain:bus:device.function, for example 0000:17:00.0.
	PCIAddress string `json:"pciAddress"`
	// Vendor and Device are the PCI ids, four lower-case hex digits each.
	Vendor string `json:"vendor"`
	Device string `json:"device"`
}
