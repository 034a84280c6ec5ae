package ramdisk

import (
	"fmt"
	"strings"

	"github.com/better-compute/better-compute/proto/joinwire"
)

// Boot is what the kernel command line of a ramdisk boot carries (bc.registry=,
// bc.pins=, bc.token=, bc.node=), as the site's boot entry wrote it.
type Boot struct {
	Registry string
	Pins     joinwire.Pins
	Token    string
	Node     string
}

// ParseCmdline reads a kernel command line. Every bc.* argument is required, and
// bc.pins holds the serving CA, join signing and join encryption pins, in that order.
func ParseCmdline(cmdline string) (Boot, error) {
	var b Boot
	var pins string
	for _, arg := range strings.Fields(cmdline) {
		key, value, _ := strings.Cut(arg, "=")
		switch key {
		case "bc.registry":
			b.Registry = value
		case "bc.pins":
			pins = value
		case "bc.token":
			b.Token = value
		case "bc.node":
			b.Node = value
		}
	}
	for _, f := range []struct{ name, value string }{{"bc.registry", b.Registry}, {"bc.pins", pins}, {"bc.token", b.Token}, {"bc.node", b.Node}} {
		if f.value == "" {
			return Boot{}, fmt.Errorf("the kernel command line has no %s=: boot the ramdisk from its site's boot entry", f.name)
		}
	}
	p := strings.Split(pins, ",")
	if len(p) != 3 {
		return Boot{}, fmt.Errorf("bc.pins holds %d pins; the ramdisk needs three (serving CA, join signing, join encryption)", len(p))
	}
	b.Pins = joinwire.Pins{ServingCA: p[0], JoinSigning: p[1], JoinEncryption: p[2]}
	return b, nil
}
