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
	// BIOSVendor, BIOSVersion and BIOSDate are the firmware's, as SMBIOS gives them.
	BIOSVendor  string `json:"biosVendor,omitempty"`
	BIOSVersion string `json:"biosVersion,omitempty"`
	BIOSDate    string `json:"biosDate,omitempty"`
}

// NICInfo is one physical network interface in the `nics` section.
type NICInfo struct {
	Name string `json:"name"`
	// MAC is lower-case, colon-separated.
	MAC    string `json:"mac"`
	Driver string `json:"driver,omitempty"`
	// PCIAddress is the NIC's PCI function (domain:bus:device.function); empty for a
	// NIC on another bus.
	PCIAddress string `json:"pciAddress,omitempty"`
	// Link is the kernel's operational state: up, down, dormant, ...
	Link string `json:"link,omitempty"`
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
	// Transport is the bus the disk hangs on: nvme, sata, sas, virtio, usb, mmc or
	// scsi (any other SCSI disk); empty when the kernel does not say.
	Transport string `json:"transport,omitempty"`
	// Erase is what sysfs says the disk can do to forget its data without writing every
	// block: Discard (TRIM, deallocate) when its queue takes discards, WriteZeroes when
	// the device zeroes ranges itself (BLKZEROOUT offloaded). The firmware erases
	// (NVMe Format and Sanitize, ATA security erase) are not in sysfs: the wipe asks the
	// device itself.
	Erase DiskErase `json:"erase"`
	// ReadOnly and Removable are the kernel's flags of the device.
	ReadOnly  bool `json:"readOnly,omitempty"`
	Removable bool `json:"removable,omitempty"`
}

// DiskErase is a disk's erase capabilities as sysfs shows them.
type DiskErase struct {
	Discard     bool `json:"discard"`
	WriteZeroes bool `json:"writeZeroes"`
	// Firmware is what the device's firmware says it can erase, asked by the ramdisk as
	// disk.wipe asks it; nil where nobody asked (bcd node, whose disks are in use, and
	// disks that are neither NVMe nor SATA). The registry keeps the ramdisk's in the
	// disks bcd node reports (registry/agents), never taking bcd node's own.
	Firmware *FirmwareErase `json:"firmware,omitempty"`
}

// FirmwareErase is a disk's firmware erase capabilities: for NVMe, Identify Controller's
// Format NVM (OACS), cryptographic Format (FNA) and Sanitize actions (SANICAP); for SATA,
// IDENTIFY DEVICE's security feature set, its frozen and locked states, and SANITIZE
// CRYPTO SCRAMBLE.
type FirmwareErase struct {
	NVMeFormat         bool `json:"nvmeFormat,omitempty"`
	NVMeFormatCrypto   bool `json:"nvmeFormatCrypto,omitempty"`
	NVMeSanitizeBlock  bool `json:"nvmeSanitizeBlock,omitempty"`
	NVMeSanitizeCrypto bool `json:"nvmeSanitizeCrypto,omitempty"`
	ATASecurityErase   bool `json:"ataSecurityErase,omitempty"`
	ATACryptoScramble  bool `json:"ataCryptoScramble,omitempty"`
	// ATAFrozen: the firmware froze the security feature set at boot; ATALocked: a
	// password the ramdisk does not know locks it. Either refuses a security erase.
	ATAFrozen bool `json:"ataFrozen,omitempty"`
	ATALocked bool `json:"ataLocked,omitempty"`
	// Hidden is the capacity of the device that no wipe of its block device reaches,
	// asked as disk.wipe asks it (a namespace allocated but not attached, NVM in no
	// namespace, an ATA Host Protected Area, a device that could not be asked): a
	// release's wipe of a disk with any that HoldsData is not attested.
	Hidden []HiddenCapacity `json:"hidden,omitempty"`
	// Error is why the device could not be asked.
	Error string `json:"error,omitempty"`
}

// CPUInfo is the `cpu` section.
type CPUInfo struct {
	Model string `json:"model,omitempty"`
	// Count is the number of logical CPUs.
	Count int `json:"count"`
	// Sockets and Cores are the physical packages and cores; 0 where /proc/cpuinfo does
	// not say (some virtual machines and architectures).
	Sockets int `json:"sockets,omitempty"`
	Cores   int `json:"cores,omitempty"`
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
	// What nvidia-smi says of the GPU, where it runs (the driver is loaded): its name,
	// UUID, driver version, memory and active NVLinks.
	Name          string `json:"name,omitempty"`
	UUID          string `json:"uuid,omitempty"`
	DriverVersion string `json:"driverVersion,omitempty"`
	MemoryMiB     int64  `json:"memoryMiB,omitempty"`
	NVLinks       int    `json:"nvlinks,omitempty"`
}
