// Package qmp is the BMC driver for qemu virtual machines: it drives a VM through its
// QMP socket as a BMC drives a server. The site runs each VM with
//
//	-S -no-shutdown -qmp unix:PATH,server=on,wait=off
//	-device virtio-net-pci,id=nic0,... -device virtio-blk-pci,id=disk0,... -device ide-cd,id=cd0,...
//
// so that a VM that powers off stays a process whose QMP socket still answers, and the
// binding's options name the devices it boots from (nic, disk, cd). Power is qemu's
// run state: a VM whose vCPUs run is on, any other is off; boot devices are the
// devices' bootindex properties, changed at run time; virtual media is the CD drive's
// medium. docs/bmc.md gives every mapping.
package qmp
