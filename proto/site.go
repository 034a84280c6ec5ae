package proto

import (
	"log/slog"
	"time"
)

// The inventory sections a site agent reports beside `images` and `site`.
const (
	// SectionDiscoveries holds the []Discovery of PXE discovery.
	SectionDiscoveries = "discoveries"
	// SectionBootEntries holds the []BootEntry the site boots machines with now, the
	// ramdisk tokens left out.
	SectionBootEntries = "bootEntries"
	// SectionImages holds the cache's []ImageCacheEntry.
	SectionImages = "images"
)

// MaxDiscoveries bounds the machines a site's `discoveries` section lists: the site
// keeps those seen last, and the registry reads no more of a section than that.
const MaxDiscoveries = 1024

// MediaInsert is the input of media.insert as the site agent receives it, the step's
// `with` resolved by the registry: the https:// URL the BMC mounts and, for a catalog
// image, its digest and the machine's MACs, with which a BMC without virtual media
// boots the ISO by iPXE sanboot from the site cache instead.
type MediaInsert struct {
	URL         string   `json:"url"`
	Digest      string   `json:"digest,omitempty"`
	MACs        []string `json:"macs,omitempty"`
	ProductUUID string   `json:"productUuid,omitempty"`
}

// Discovery is a machine the site's boot server saw network-booting without a boot
// entry: an element of the `discoveries` inventory section.
type Discovery struct {
	// MAC is the interface it booted from, lower-case, colon-separated.
	MAC string `json:"mac"`
	// ProductUUID is the SMBIOS product UUID of DHCP option 97, as dmidecode spells it;
	// empty when the machine sent none.
	ProductUUID string `json:"productUuid,omitempty"`
	// Arch is the client architecture of DHCP option 93, when the machine sent one.
	Arch *uint16 `json:"arch,omitempty"`
	// FirstSeen and LastSeen bound when it asked.
	FirstSeen time.Time `json:"firstSeen"`
	LastSeen  time.Time `json:"lastSeen"`
}

// BMCCredential is a BMC login as a site command carries it: the reference it was
// resolved from (the bindings' credentialRef, which the site checks against) and the user
// name and password. It shows the password only to encoding/json, for the wire: fmt and
// slog see it redacted.
type BMCCredential struct {
	Ref      string `json:"ref"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// String shows the reference and user name only.
func (c BMCCredential) String() string { return c.Ref + " " + c.Username + ":[redacted]" }

// GoString shows the reference and user name only, for %#v.
func (c BMCCredential) GoString() string {
	return "proto.BMCCredential{Ref:" + c.Ref + ", Username:" + c.Username + ", Password:[redacted]}"
}

// LogValue shows the reference and user name only.
func (c BMCCredential) LogValue() slog.Value {
	return slog.GroupValue(slog.String("ref", c.Ref), slog.String("username", c.Username), slog.String("password", "[redacted]"))
}
