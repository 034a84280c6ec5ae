// Package deploy is the loopback test of a whole deploy: a real registry (`serve`), a
// real `bcd ramdisk` process as the machine (its kernel command line a file, its disk a
// file, its sysfs a tree), a site agent in the test process that speaks the real agent
// protocol and power-cycles the machine by starting that process, and a signed image
// served over HTTPS. boot.kexec is replaced by --boot-command: the test binary, run as
// the written OS's first boot, reads the user data from the disk and runs the `bcd join`
// and `bcd node` it names.
package deploy
