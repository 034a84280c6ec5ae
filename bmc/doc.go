// Package bmc is how bcd site reaches a machine out of band: one small interface per
// concern (Power, Management, VirtualMedia, Inspection), the Driver that bundles them,
// the table of drivers by name, and credentials held as references.
//
// The drivers live in the subpackages (bmc/redfish, bmc/qmp); bmc/drivers assembles the
// table bcd site opens them from. Every failure a BMC reports is DRIVER_ERROR carrying
// the BMC's own message; an operation the hardware lacks is UNSUPPORTED and changes
// nothing, so the caller can take another way (iPXE sanboot instead of virtual media).
package bmc
