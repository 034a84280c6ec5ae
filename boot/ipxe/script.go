// Package ipxe renders the iPXE scripts the boot server hands to machines: boot a ramdisk,
// leave to the local disk, sanboot an ISO, or wait and ask again. Every value that goes
// into a script is checked first, so that nothing in a machine's entry can add a line, a
// command or a settings expansion to the script.
package ipxe

import (
	"fmt"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Kind says what a script makes the machine do.
type Kind string

// The kinds of script.
const (
	// Ramdisk downloads a kernel and an initrd and boots them with a command line.
	Ramdisk Kind = "ramdisk"
	// Disk leaves iPXE (`exit`), so the firmware boots the next device: the local disk.
	Disk Kind = "disk"
	// Sanboot boots an ISO over HTTP with `sanboot`.
	Sanboot Kind = "sanboot"
	// Wait sleeps and then asks for its script again: the answer for a machine the site
	// does not know yet, so that it boots as soon as an entry appears.
	Wait Kind = "wait"
)

// Script is everything one rendered script depends on.
type Script struct {
	Kind Kind
	// MAC is the machine's address as the script's comment and its retry URL name it.
	MAC string
	// Self is the URL of this script, chained again after a failure or a wait.
	Self string
	// Kernel and Initrd are the ramdisk's URLs (Ramdisk).
	Kernel, Initrd string
	// Extras are the URLs of extra initrds loaded after Initrd, in order (Ramdisk).
	Extras []string
	// Args are the kernel command line, one word each (Ramdisk).
	Args []string
	// ISO is the URL sanboot boots (Sanboot).
	ISO string
	// Retry is how long the machine sleeps before it asks again, after a failure or
	// while it waits (whole seconds; at least one).
	Retry time.Duration
	// Rebind has a Wait script ask DHCP for an address again (on the interface iPXE
	// opened last) before it asks for its script again: the script of a machine that
	// asked from an address not its own.
	Rebind bool
}

// initrdName is the name the initrd gets inside iPXE; the kernel's `initrd=` argument
// names it, which UEFI kernels need and BIOS kernels ignore. Extra initrds are named
// extraName + their index, and named by `initrd=` arguments of their own in order.
const (
	initrdName = "initrd"
	extraName  = "extra"
)

// Render returns the script's text, or INVALID_INPUT naming the field that holds a value
// that could change the script's structure.
func Render(s Script) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	retry := int(s.Retry / time.Second)
	if retry < 1 {
		retry = 1
	}
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	fmt.Fprintf(&b, "# better-compute: %s for %s\n", s.Kind, s.MAC)
	switch s.Kind {
	case Ramdisk:
		args := []string{"initrd=" + initrdName}
		for i := range s.Extras {
			args = append(args, fmt.Sprintf("initrd=%s%d", extraName, i))
		}
		args = append(args, s.Args...)
		fmt.Fprintf(&b, "kernel %s %s || goto failed\n", s.Kernel, strings.Join(args, " "))
		fmt.Fprintf(&b, "initrd --name %s %s || goto failed\n", initrdName, s.Initrd)
		for i, x := range s.Extras {
			fmt.Fprintf(&b, "initrd --name %s%d %s || goto failed\n", extraName, i, x)
		}
		b.WriteString("boot || goto failed\n")
	case Disk:
		b.WriteString("exit\n")
		return []byte(b.String()), nil
	case Sanboot:
		fmt.Fprintf(&b, "sanboot --no-describe %s || goto failed\n", s.ISO)
	case Wait:
		if s.Rebind {
			b.WriteString("echo better-compute: no script for this address; asking DHCP again\n")
			fmt.Fprintf(&b, "sleep %d\n", retry)
			b.WriteString("dhcp netX || echo better-compute: DHCP failed\n")
		} else {
			b.WriteString("echo better-compute: this machine has no boot entry yet; it was reported for discovery\n")
			fmt.Fprintf(&b, "sleep %d\n", retry)
		}
		fmt.Fprintf(&b, "chain --replace --autofree %s\n", s.Self)
		return []byte(b.String()), nil
	}
	b.WriteString(":failed\n")
	fmt.Fprintf(&b, "echo better-compute: %s boot failed; retrying in %d s\n", s.Kind, retry)
	fmt.Fprintf(&b, "sleep %d\n", retry)
	fmt.Fprintf(&b, "chain --replace --autofree %s\n", s.Self)
	return []byte(b.String()), nil
}

// check refuses a script whose values are missing or could change its structure.
func (s Script) check() error {
	type field struct{ path, value string }
	fields := []field{{"mac", s.MAC}}
	switch s.Kind {
	case Ramdisk:
		fields = append(fields, field{"self", s.Self}, field{"kernel", s.Kernel}, field{"initrd", s.Initrd})
		for i, a := range s.Args {
			fields = append(fields, field{fmt.Sprintf("args[%d]", i), a})
		}
		for i, x := range s.Extras {
			fields = append(fields, field{fmt.Sprintf("extras[%d]", i), x})
		}
	case Sanboot:
		fields = append(fields, field{"self", s.Self}, field{"iso", s.ISO})
	case Wait:
		fields = append(fields, field{"self", s.Self})
	case Disk:
	default:
		return proto.Errorf(proto.InvalidInput, "unknown script kind %q: want ramdisk, disk, sanboot or wait", s.Kind).WithPath("kind")
	}
	for _, f := range fields {
		if err := CheckWord(f.value); err != nil {
			return proto.Errorf(proto.InvalidInput, "%s: %v", f.path, err).WithPath(f.path).WithReason(proto.ReasonUnsafeScriptValue)
		}
	}
	return nil
}

// CheckWord returns an error unless w can stand as one word of an iPXE command: printable
// ASCII without spaces, quotes, backslashes, `$` (settings expansion) or the `||` and
// `&&` operators. Kernel arguments, URLs and MACs all fit in that.
func CheckWord(w string) error {
	if w == "" {
		return fmt.Errorf("empty value")
	}
	for i := 0; i < len(w); i++ {
		c := w[i]
		switch {
		case c <= ' ' || c >= 0x7f:
			return fmt.Errorf("byte %#02x at offset %d: only printable ASCII without spaces may go into a script", c, i)
		case c == '$' || c == '"' || c == '\'' || c == '\\' || c == '`':
			return fmt.Errorf("character %q at offset %d would change the script's meaning", c, i)
		}
	}
	if strings.Contains(w, "||") || strings.Contains(w, "&&") {
		return fmt.Errorf("%q holds an iPXE operator (|| or &&)", w)
	}
	return nil
}
