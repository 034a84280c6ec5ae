package proto

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The shapes of identifiers both sides name: the registry checks what it stores and the
// agents check what they are told with the same rules, so a value one side accepts is
// never one the other refuses.
var (
	// nodeID is a node id: an argument on a command line and a systemd unit, a
	// certificate's CommonName, part of the join's sealing AAD and a store key.
	nodeID = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	// commandID is a relayed command's id, made by the registry from a run, a step and an
	// attempt (wf_0123456789abcdef:main.5:a1, see registry/workflow), so it also takes
	// ':' and upper case.
	commandID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	// imageName and imageVersion make an image ref name@version
	// (ubuntu-24.04-server@2026.09), as the catalog registers and resolves it.
	imageName    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	imageVersion = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	// objectName is a tenant id, a site's or a pool's name: 1 to 63 lower-case letters,
	// digits and hyphens, starting with a letter.
	objectName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	// driverName is a driver a binding names (redfish, qmp, ipxe, image-stream).
	driverName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	// templateName is a user-data template a profile names (bcd-host.yaml.hbs).
	templateName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	// digest is a SHA-256 as the catalog writes it: 64 lower-case hex digits.
	digest = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// bootID is a boot id as Linux writes /proc/sys/kernel/random/boot_id: a UUID in
	// lower-case hex, 8-4-4-4-12.
	bootID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	// sectionName is an inventory section's name (system, bootEntries): a key of a
	// hello's inventory, part of the store's key of the section and of the paths of its
	// errors (inventory.<section>), so no '.' and no '/'.
	sectionName = regexp.MustCompile(`^[a-z][A-Za-z0-9_-]{0,63}$`)
)

// CheckNodeID refuses a string that cannot be a node id: 1 to 128 lower-case letters,
// digits, '.', '_' and '-', starting with a letter or digit (docs/join.md).
func CheckNodeID(id string) error {
	if !nodeID.MatchString(id) {
		return Errorf(InvalidInput, "node id %s: use 1 to 128 lower-case letters, digits, '.', '_' and '-', starting with a letter or digit", Quote(id))
	}
	return nil
}

// CheckBootID refuses a string that cannot be a machine's boot id: empty (an agent of an
// earlier version, or one that could not read it) or a UUID in lower-case hex, 8-4-4-4-12,
// as Linux writes /proc/sys/kernel/random/boot_id, new at every boot.
func CheckBootID(id string) error {
	if id != "" && !bootID.MatchString(id) {
		return Errorf(InvalidInput, "boot id %s: send the UUID of /proc/sys/kernel/random/boot_id as it reads (lower-case hex, 8-4-4-4-12), or none", Quote(id))
	}
	return nil
}

// CheckSectionName refuses a string that cannot name an inventory section: 1 to 64
// letters, digits, '_' and '-', starting with a lower-case letter. Every section an
// agent reports is named so (system, bootEntries); the registry keeps only those of the
// agent's role (CheckInventorySection), and refuses a hello or a section named otherwise
// before it reads anything else of it.
func CheckSectionName(name string) error {
	if !sectionName.MatchString(name) {
		return Errorf(InvalidInput, "inventory section name %s: use 1 to 64 letters, digits, '_' and '-', starting with a lower-case letter", Quote(name))
	}
	return nil
}

// MaxReason is the longest reason an operator gives a request (a remediation, a
// revocation), in bytes.
const MaxReason = 256

// OperatorReason checks the reason an operator gives a request, recorded with what it
// did: at most MaxReason bytes of UTF-8 on one line, INVALID_INPUT at reason otherwise.
// It returns the reason, or "an operator asked" for none.
func OperatorReason(reason string) (string, error) {
	if len(reason) > MaxReason {
		return "", Errorf(InvalidInput, "the reason is %d bytes: say it in at most %d", len(reason), MaxReason).WithPath("reason")
	}
	if strings.ContainsFunc(reason, unicode.IsControl) || !utf8.ValidString(reason) {
		return "", Errorf(InvalidInput, "the reason holds control characters or is not UTF-8: write it on one line of text").WithPath("reason")
	}
	if reason == "" {
		reason = "an operator asked"
	}
	return reason, nil
}

// CheckCommandID refuses an id that cannot name a relayed command: 1 to 128 letters,
// digits, '.', '_', ':' and '-', starting with a letter or digit.
func CheckCommandID(id string) error {
	if !commandID.MatchString(id) {
		return Errorf(InvalidInput, "command id %q: use 1 to 128 letters, digits, '.', '_', ':' and '-', starting with a letter or digit", id)
	}
	return nil
}

// IsObjectName reports whether s can be a tenant id, a site's or a pool's name: 1 to 63
// lower-case letters, digits and hyphens, starting with a letter.
func IsObjectName(s string) bool { return objectName.MatchString(s) }

// IsDriverName reports whether s can name a driver: 1 to 63 lower-case letters, digits
// and '-', starting with a letter or digit.
func IsDriverName(s string) bool { return driverName.MatchString(s) }

// IsTemplateName reports whether s can name a user-data template: 1 to 128 lower-case
// letters, digits, '.', '_' and '-', starting with a letter or digit.
func IsTemplateName(s string) bool { return templateName.MatchString(s) }

// IsDigest reports whether s is a SHA-256 as the catalog writes it: 64 lower-case hex
// digits.
func IsDigest(s string) bool { return digest.MatchString(s) }

// ImageRef names an image of a tenant's catalog: name@version, unique per tenant.
type ImageRef struct {
	Name, Version string
}

func (r ImageRef) String() string { return r.Name + "@" + r.Version }

// ParseImageRef reads name@version: a name of 1 to 128 and a version of 1 to 64
// lower-case letters, digits, '.', '_' and '-', each starting with a letter or digit.
// Anything else is INVALID_INPUT at the path "ref". A profile's image, a pool's
// pre-warm list and the catalog all read refs with it, so a profile can only name a ref
// the catalog can register.
func ParseImageRef(s string) (ImageRef, error) {
	name, version, ok := strings.Cut(s, "@")
	if !ok {
		return ImageRef{}, Errorf(InvalidInput, "image ref %q: write name@version, for example ubuntu-24.04-server@2026.09", s).WithPath("ref")
	}
	if !imageName.MatchString(name) {
		return ImageRef{}, Errorf(InvalidInput, "image ref %q: the name must be 1 to 128 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", s).WithPath("ref")
	}
	if !imageVersion.MatchString(version) {
		return ImageRef{}, Errorf(InvalidInput, "image ref %q: the version must be 1 to 64 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", s).WithPath("ref")
	}
	return ImageRef{Name: name, Version: version}, nil
}
