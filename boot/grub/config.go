// Package grub renders the GRUB configurations the boot server hands to machines that
// boot the signed chain (shim, then Debian's network GRUB) under UEFI Secure Boot: the
// same boots as the iPXE scripts of boot/ipxe, in GRUB's language. Debian's network
// GRUB speaks TFTP only (its http module is not built in, and Secure Boot forbids
// loading one), so every file a configuration names is a path on the TFTP server GRUB
// was loaded from. Every value that goes into a configuration is checked against a
// narrow set of characters first, so that nothing in a machine's entry can add a
// command, a block or a variable expansion.
package grub

import (
	"fmt"
	"strings"
	"time"

	"github.com/better-compute/better-compute/boot/ipxe"
	"github.com/better-compute/better-compute/proto"
)

// EntryName is the configuration Debian's network GRUB loads first: grub.cfg in its
// prefix, /grub, on the TFTP server it was loaded from.
const EntryName = "grub/grub.cfg"

// Entry is the text of EntryName: it loads the machine's own configuration, Path of
// GRUB's ${net_default_mac}, the MAC of the interface GRUB booted from.
const Entry = "# better-compute: each machine's configuration is /boot/<mac>.grub\n" +
	"configfile /boot/${net_default_mac}.grub\n"

// Path is the TFTP name of a machine's configuration, mac spelled as GRUB spells
// ${net_default_mac} (lower case, colons).
func Path(mac string) string { return "boot/" + mac + ".grub" }

// Render returns the GRUB configuration of s, or INVALID_INPUT naming the field whose
// value can not go into it. tftp gives the TFTP path at which the boot server serves the
// file of a URL of s, ok false for one it does not serve so. A Sanboot script is
// refused: GRUB has no counterpart of iPXE's sanboot.
func Render(s ipxe.Script, tftp func(url string) (path string, ok bool)) ([]byte, error) {
	paths, err := check(s, tftp)
	if err != nil {
		return nil, err
	}
	retry := max(int(s.Retry/time.Second), 1)
	var b strings.Builder
	fmt.Fprintf(&b, "# better-compute: %s for %s\n", s.Kind, s.MAC)
	switch s.Kind {
	case ipxe.Ramdisk:
		fmt.Fprintf(&b, "linux %s %s\n", paths[0], strings.Join(s.Args, " "))
		fmt.Fprintf(&b, "initrd %s\n", strings.Join(paths[1:], " "))
		b.WriteString("boot\n")
		fmt.Fprintf(&b, "echo 'better-compute: ramdisk boot failed, retrying in %d s'\n", retry)
	case ipxe.Disk:
		// Back to the firmware, which boots its next option: the local disk.
		b.WriteString("exit\n")
		return []byte(b.String()), nil
	case ipxe.Wait:
		b.WriteString("echo 'better-compute: this machine has no boot entry yet, it was reported for discovery'\n")
	}
	fmt.Fprintf(&b, "sleep %d\n", retry)
	fmt.Fprintf(&b, "configfile /%s\n", Path(s.MAC))
	return []byte(b.String()), nil
}

// check refuses a script GRUB can not boot or whose values could change the
// configuration's structure. It returns the paths of a ramdisk's kernel, initrd and
// extra initrds, in order.
func check(s ipxe.Script, tftp func(string) (string, bool)) (paths []string, err error) {
	type field struct{ path, value string }
	fields := []field{{"mac", s.MAC}}
	var urls []field
	switch s.Kind {
	case ipxe.Ramdisk:
		urls = append(urls, field{"kernel", s.Kernel}, field{"initrd", s.Initrd})
		for i, x := range s.Extras {
			urls = append(urls, field{fmt.Sprintf("extras[%d]", i), x})
		}
		for i, a := range s.Args {
			fields = append(fields, field{fmt.Sprintf("args[%d]", i), a})
		}
	case ipxe.Wait, ipxe.Disk:
	case ipxe.Sanboot:
		return nil, proto.Errorf(proto.InvalidInput, "GRUB can not sanboot an ISO: a machine that boots the signed chain boots the ramdisk or its disk").WithPath("kind")
	default:
		return nil, proto.Errorf(proto.InvalidInput, "unknown script kind %q: want ramdisk, disk or wait", s.Kind).WithPath("kind")
	}
	for _, u := range urls {
		p, ok := tftp(u.value)
		if !ok {
			return nil, proto.Errorf(proto.InvalidInput, "%s: %q is not a file the boot server serves by TFTP, and GRUB loads files by TFTP from it alone", u.path, u.value).
				WithPath(u.path).WithReason(proto.ReasonUnsafeScriptValue)
		}
		fields = append(fields, field{u.path, p})
		paths = append(paths, p)
	}
	for _, f := range fields {
		if err := CheckWord(f.value); err != nil {
			return nil, proto.Errorf(proto.InvalidInput, "%s: %v", f.path, err).WithPath(f.path).WithReason(proto.ReasonUnsafeScriptValue)
		}
	}
	return paths, nil
}

// CheckWord returns an error unless w can stand as one word of a GRUB command: letters,
// digits and `-_.,:/=+@%~` only. Everything else is refused, since GRUB's script
// language gives meaning to quotes, `\`, `$`, `;`, `|`, `&`, `<`, `>`, `{`, `}`, `(`
// and a word's leading `#`; kernel arguments, MACs, tokens, base64 pins and file paths
// fit in the rest.
func CheckWord(w string) error {
	if w == "" {
		return fmt.Errorf("empty value")
	}
	for i := 0; i < len(w); i++ {
		c := w[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("-_.,:/=+@%~", c) >= 0:
		case c <= ' ' || c >= 0x7f:
			return fmt.Errorf("byte %#02x at offset %d: only printable ASCII without spaces may go into a GRUB configuration", c, i)
		default:
			return fmt.Errorf("character %q at offset %d may change a GRUB configuration's meaning", c, i)
		}
	}
	return nil
}
