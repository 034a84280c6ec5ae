package proto

import (
	"encoding/json"
	"slices"
	"time"
)

// The BMC drivers bcd site has (bmc/drivers), by the names enrolments give them.
const (
	BMCDriverRedfish = "redfish"
	BMCDriverQMP     = "qmp"
)

// BMCDrivers lists the BMC drivers an enrolment may name.
var BMCDrivers = []string{BMCDriverRedfish, BMCDriverQMP}

// BMCOptionCAFile is the option of a driver's config (the redfish driver's) that names
// a file of the site host: the PEM CAs the BMC's certificate chains to.
const BMCOptionCAFile = "caFile"

// BMCOptionTLSPin is the option of a driver's config (the redfish driver's) that trusts
// the BMC by its certificate's key: sha256/BASE64 of its SubjectPublicKeyInfo.
const BMCOptionTLSPin = "tlsPin"

// BMCTrustOptions are the options of a driver's config that decide which peer the
// driver trusts as the BMC, and so sends the BMC's credential to. For a BMC the
// platform bound with its own credential they stand as the platform set them: a
// tenant's profile names none of them. A driver that gains such an option lists it here.
var BMCTrustOptions = []string{BMCOptionCAFile, BMCOptionTLSPin}

// SiteHostFile is the path, within a driver binding's config, of an option that names a
// file of the site host (options.caFile), "" when config names none. The site agent
// reads that file for each command of the binding, so only the platform names one: in a
// hardware profile, or in a binding a root-tenant credential makes; a tenant trusts its
// BMC by its key (options.tlsPin). A config that does not decode names none.
func SiteHostFile(config json.RawMessage) string {
	var c struct {
		Options map[string]json.RawMessage `json:"options"`
	}
	if json.Unmarshal(config, &c) != nil {
		return ""
	}
	if _, ok := c.Options[BMCOptionCAFile]; ok {
		return "options." + BMCOptionCAFile
	}
	return ""
}

// BMCOptionPowerTimeout is the option of a driver's config that bounds how long the
// driver waits for a power or media change to show ("90s", "5m").
const BMCOptionPowerTimeout = "powerTimeout"

// MaxPowerTimeout is the longest powerTimeout a binding names: how long a site runs one
// command (MaxSiteCommandSeconds). A wait no site command could finish holds a command
// slot of the site, which every tenant of the site shares, for nothing.
const MaxPowerTimeout = MaxSiteCommandSeconds * time.Second

// LongWait is the path, within a driver binding's config, of an option that asks for a
// wait longer than MaxPowerTimeout (options.powerTimeout), "" when config asks for
// none. A config that does not decode, or a duration that does not parse, is left to
// the driver, which refuses it.
func LongWait(config json.RawMessage) string {
	var c struct {
		Options map[string]string `json:"options"`
	}
	if json.Unmarshal(config, &c) != nil {
		return ""
	}
	if d, err := time.ParseDuration(c.Options[BMCOptionPowerTimeout]); err == nil && d > MaxPowerTimeout {
		return "options." + BMCOptionPowerTimeout
	}
	return ""
}

// PowerState is a machine's power as its BMC reports it: the result of power.getPower.
type PowerState string

// The power states.
const (
	PowerStateOn          PowerState = "on"
	PowerStateOff         PowerState = "off"
	PowerStatePoweringOn  PowerState = "powering-on"
	PowerStatePoweringOff PowerState = "powering-off"
	PowerStatePaused      PowerState = "paused"
	// PowerStateUnknown: the BMC reported nothing, or something no driver knows.
	PowerStateUnknown PowerState = "unknown"
)

// PowerAction is what power.setPower asks of a machine.
type PowerAction string

// The seven power actions of power.setPower.
const (
	// PowerActionOn powers the machine on; nothing happens when it is on.
	PowerActionOn PowerAction = "on"
	// PowerActionOff cuts power at once; nothing happens when it is off.
	PowerActionOff PowerAction = "off"
	// PowerActionGracefulOff asks the OS to shut down and waits until the machine is off.
	PowerActionGracefulOff PowerAction = "graceful-off"
	// PowerActionReset restarts the machine at once.
	PowerActionReset PowerAction = "reset"
	// PowerActionGracefulRestart asks the OS to restart.
	PowerActionGracefulRestart PowerAction = "graceful-restart"
	// PowerActionCycle powers the machine off, then on.
	PowerActionCycle PowerAction = "cycle"
	// PowerActionNMI raises a non-maskable interrupt (a crash dump on most OSes).
	PowerActionNMI PowerAction = "nmi"
)

// PowerActions lists the actions in the order the documentation gives them.
var PowerActions = []PowerAction{PowerActionOn, PowerActionOff, PowerActionGracefulOff, PowerActionReset,
	PowerActionGracefulRestart, PowerActionCycle, PowerActionNMI}

// ParsePowerAction returns the action s names, or INVALID_CONFIG at "action".
func ParsePowerAction(s string) (PowerAction, error) {
	if a := PowerAction(s); slices.Contains(PowerActions, a) {
		return a, nil
	}
	return "", Errorf(InvalidConfig, "power action %q is not one of on, off, graceful-off, reset, graceful-restart, cycle, nmi", s).WithPath("action")
}

// Restarts reports whether the action boots the machine afresh: reset, graceful-restart
// and cycle do, and on a machine that is off each of them powers it on.
func (a PowerAction) Restarts() bool {
	return a == PowerActionReset || a == PowerActionGracefulRestart || a == PowerActionCycle
}

// Boots reports whether the machine runs its boot afterwards, so a step that asked for
// the action can await its rejoin: on, and every action that Restarts.
func (a PowerAction) Boots() bool { return a == PowerActionOn || a.Restarts() }

// BootDevice is where management.setBootDevice makes a machine boot from.
type BootDevice string

// The boot devices.
const (
	// BootDevicePXE: the network, by PXE.
	BootDevicePXE BootDevice = "pxe"
	// BootDeviceHTTP: the network, by UEFI HTTP boot.
	BootDeviceHTTP BootDevice = "http"
	// BootDeviceDisk: the first local disk.
	BootDeviceDisk BootDevice = "disk"
	// BootDeviceCD: the CD/DVD drive, virtual media included.
	BootDeviceCD BootDevice = "cd"
)

// BootDevices lists the devices in the order the documentation gives them.
var BootDevices = []BootDevice{BootDevicePXE, BootDeviceHTTP, BootDeviceDisk, BootDeviceCD}

// ParseBootDevice returns the device s names, or INVALID_CONFIG at "device".
func ParseBootDevice(s string) (BootDevice, error) {
	if d := BootDevice(s); slices.Contains(BootDevices, d) {
		return d, nil
	}
	return "", Errorf(InvalidConfig, "boot device %q is not one of pxe, http, disk, cd", s).WithPath("device")
}
