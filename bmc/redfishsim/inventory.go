package redfishsim

import (
	"fmt"
	"net/http"
)

const systemPath = "/redfish/v1/Systems/1"

// The machine the service describes.
const (
	Manufacturer    = "Contoso"
	Model           = "GPU Server 8x"
	SerialNumber    = "CN7475123J0042"
	UUID            = "4c4c4544-0042-3510-8058-b4c04f4d3032"
	BIOSVersion     = "2.19.1"
	BMCModel        = "Contoso BMC 9"
	BMCFirmware     = "7.10.30.00"
	MemoryGiB       = 64
	DIMMCapacityMiB = 32768
)

// cpus, dimms, nics and drives are the machine's parts.
var (
	cpus = []map[string]any{
		{"Id": "CPU1", "Socket": "CPU 1", "ProcessorType": "CPU", "Manufacturer": "Intel", "Model": "Xeon Platinum 8480+", "TotalCores": 56, "TotalThreads": 112, "MaxSpeedMHz": 3800},
		{"Id": "CPU2", "Socket": "CPU 2", "ProcessorType": "CPU", "Manufacturer": "Intel", "Model": "Xeon Platinum 8480+", "TotalCores": 56, "TotalThreads": 112, "MaxSpeedMHz": 3800},
		{"Id": "GPU1", "Socket": "SXM 1", "ProcessorType": "GPU", "Manufacturer": "NVIDIA", "Model": "H100 SXM5 80GB"},
	}
	// DIMM_A1 is named as before Redfish 1.9 (DeviceLocator), DIMM_B1 as since
	// (Location.PartLocation.ServiceLabel, DeviceLocator deprecated and left out).
	dimms = []map[string]any{
		{"Id": "DIMM_A1", "DeviceLocator": "A1", "CapacityMiB": DIMMCapacityMiB, "MemoryDeviceType": "DDR5", "OperatingSpeedMhz": 4800},
		{"Id": "DIMM_B1", "Location": map[string]any{"PartLocation": map[string]any{"ServiceLabel": "B1"}}, "CapacityMiB": DIMMCapacityMiB, "MemoryDeviceType": "DDR5", "OperatingSpeedMhz": 4800},
	}
	nics = []map[string]any{
		{"Id": "NIC.Integrated.1-1", "MACAddress": "B4:96:91:0A:1B:2C", "SpeedMbps": 25000},
		{"Id": "NIC.Slot.3-1", "MACAddress": "", "PermanentMACAddress": "0C:42:A1:3D:4E:5F", "SpeedMbps": 400000},
	}
	drives = []map[string]any{
		{"Id": "Disk.0", "Name": "NVMe 0", "Model": "PM1743", "SerialNumber": "S6CUNA0T100001", "CapacityBytes": 3840755982336, "MediaType": "SSD", "Protocol": "NVMe"},
	}
)

// inventoryRoutes serves the collections of the machine's parts.
func (s *Server) inventoryRoutes(mux *http.ServeMux) {
	parts := map[string][]map[string]any{"Processors": cpus, "Memory": dimms, "EthernetInterfaces": nics, "Storage/1/Drives": drives}
	for name, list := range parts {
		base := systemPath + "/" + name
		var ids []string
		for _, p := range list {
			ids = append(ids, fmt.Sprint(base, "/", p["Id"]))
		}
		if name != "Storage/1/Drives" {
			mux.HandleFunc("GET "+base, s.authed(s.resource(func() any { return collection(base, ids...) })))
		}
		for i, p := range list {
			body := map[string]any{"@odata.id": ids[i], "Name": p["Id"]}
			for k, v := range p {
				body[k] = v
			}
			mux.HandleFunc("GET "+ids[i], s.authed(s.resource(func() any { return body })))
		}
	}
	mux.HandleFunc("GET "+systemPath+"/Storage", s.authed(s.resource(func() any { return collection(systemPath+"/Storage", systemPath+"/Storage/1") })))
	mux.HandleFunc("GET "+systemPath+"/Storage/1", s.authed(s.resource(func() any {
		links := make([]any, len(drives))
		for i, d := range drives {
			links[i] = link(fmt.Sprint(systemPath, "/Storage/1/Drives/", d["Id"]))
		}
		return map[string]any{"@odata.id": systemPath + "/Storage/1", "Id": "1", "Name": "Storage Controller", "Drives": links, "Drives@odata.count": len(links)}
	})))
}

// system is the ComputerSystem resource.
func (s *Server) system() any {
	return map[string]any{
		"@odata.id":    systemPath,
		"@odata.type":  "#ComputerSystem.v1_20_0.ComputerSystem",
		"Id":           "1",
		"Name":         "System",
		"Manufacturer": Manufacturer,
		"Model":        Model,
		"SerialNumber": SerialNumber,
		"UUID":         UUID,
		"BiosVersion":  BIOSVersion,
		"PowerState":   s.powerState(),
		"Boot": map[string]any{
			"BootSourceOverrideTarget":                         s.boot.Target,
			"BootSourceOverrideEnabled":                        s.boot.Enabled,
			"BootSourceOverrideMode":                           s.boot.Mode,
			"BootSourceOverrideTarget@Redfish.AllowableValues": s.cfg.BootTargets,
		},
		"MemorySummary":      map[string]any{"TotalSystemMemoryGiB": MemoryGiB},
		"ProcessorSummary":   map[string]any{"Count": 2},
		"Processors":         link(systemPath + "/Processors"),
		"Memory":             link(systemPath + "/Memory"),
		"EthernetInterfaces": link(systemPath + "/EthernetInterfaces"),
		"Storage":            link(systemPath + "/Storage"),
		"Links":              map[string]any{"ManagedBy": []any{link(managerPath)}},
		"Actions":            map[string]any{"#ComputerSystem.Reset": s.resetAction()},
	}
}

// manager is the BMC's own resource.
func (s *Server) manager() any {
	m := map[string]any{
		"@odata.id":       managerPath,
		"@odata.type":     "#Manager.v1_17_0.Manager",
		"Id":              "1",
		"Name":            "Manager",
		"ManagerType":     "BMC",
		"Model":           BMCModel,
		"FirmwareVersion": BMCFirmware,
		"Links":           map[string]any{"ManagerForServers": []any{link(systemPath)}},
	}
	if !s.cfg.NoVirtualMedia {
		m["VirtualMedia"] = link(managerPath + "/VirtualMedia")
	}
	return m
}
