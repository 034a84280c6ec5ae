package proto

import (
	"encoding/hex"
	"fmt"
	"net"
	"strings"
)

// ParseProductUUID reads an SMBIOS product UUID in any of its spellings: 32 hex digits
// in either case, with the usual hyphens or none, optionally in braces.
func ParseProductUUID(s string) ([16]byte, error) {
	var u [16]byte
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
		t = t[1 : len(t)-1]
	}
	if len(t) == 36 {
		if t[8] != '-' || t[13] != '-' || t[18] != '-' || t[23] != '-' {
			return u, fmt.Errorf("product UUID %s: hyphens out of place", Quote(s))
		}
		t = t[:8] + t[9:13] + t[14:18] + t[19:23] + t[24:]
	}
	if len(t) != 32 {
		return u, fmt.Errorf("product UUID %s is not 32 hex digits", Quote(s))
	}
	if _, err := hex.Decode(u[:], []byte(t)); err != nil {
		return u, fmt.Errorf("product UUID %s is not 32 hex digits", Quote(s))
	}
	return u, nil
}

// swapped is u with its first three groups byte-reversed. SMBIOS 2.6 and later store
// those fields little-endian; firmware and tools that read them as big-endian (or the
// other way round) report the same UUID as, for example, 33221100-5544-7766-8899-aabbccddeeff
// instead of 00112233-4455-6677-8899-aabbccddeeff. Both name one machine.
func swapped(u [16]byte) [16]byte {
	s := u
	s[0], s[1], s[2], s[3] = u[3], u[2], u[1], u[0]
	s[4], s[5] = u[5], u[4]
	s[6], s[7] = u[7], u[6]
	return s
}

// SwappedProductUUID is the other spelling of the product UUID s (swapped): its first
// three groups byte-swapped, lower-case, 8-4-4-4-12. False when s is no product UUID or
// both spellings are one.
func SwappedProductUUID(s string) (string, bool) {
	u, err := ParseProductUUID(s)
	if err != nil || swapped(u) == u {
		return "", false
	}
	w := swapped(u)
	h := hex.EncodeToString(w[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], true
}

// SameProductUUID reports whether two product UUIDs name the same machine: the same
// bytes in any spelling, or the same with the first three groups byte-swapped.
func SameProductUUID(a, b string) bool {
	ua, err := ParseProductUUID(a)
	if err != nil {
		return false
	}
	ub, err := ParseProductUUID(b)
	if err != nil {
		return false
	}
	return ua == ub || ua == swapped(ub)
}

// Identity is what the registry knows of an enrolled machine.
type Identity struct {
	// ProductUUID is the UUID given at enrollment; empty when none was.
	ProductUUID string
	// MAC is the provisioning MAC PXE discovery bound; empty when none was.
	MAC string
}

// CheckIdentity checks that the machine whose ramdisk reported system and nics is the
// one enrolled: a reported product UUID must be a spelling of the enrolled one, and the
// NICs must include the bound MAC. A mismatch is DRIVER_ERROR with reason
// machine-identity-mismatch. What was not enrolled, or not reported (a firmware without
// a UUID), is not checked.
func CheckIdentity(want Identity, system SystemInfo, nics []NICInfo) error {
	mismatch := func(format string, args ...any) error {
		return Errorf(DriverError, format, args...).WithReason(ReasonIdentityMismatch)
	}
	if want.ProductUUID != "" && system.ProductUUID != "" && !SameProductUUID(want.ProductUUID, system.ProductUUID) {
		return mismatch("the machine reports product UUID %s; %s was enrolled", system.ProductUUID, want.ProductUUID)
	}
	if want.MAC == "" {
		return nil
	}
	bound, err := net.ParseMAC(want.MAC)
	if err != nil {
		return mismatch("the bound MAC %q is not a MAC address", want.MAC)
	}
	for _, n := range nics {
		if m, err := net.ParseMAC(n.MAC); err == nil && m.String() == bound.String() {
			return nil
		}
	}
	return mismatch("no network interface of the machine has the bound MAC %s", bound)
}
