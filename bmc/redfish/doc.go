// Package redfish is the BMC driver for Redfish services: power through
// ComputerSystem.Reset, boot overrides through the system's Boot properties, virtual
// media through the manager's (or system's) CD/DVD, and the inventory for inspect.oob.
// It talks to the BMC with gofish, over HTTPS only, and takes the quirks of real BMCs
// (no Redfish sessions, overrides kept Continuous, unreadable inventory parts) as
// docs/bmc.md lists them.
package redfish
