package proto

import (
	"encoding/json"
	"time"
)

// SiteCommand is the payload of every command relayed to a site agent: the machine the
// step acts on, the driver bindings it is reached with, and the step's input.
type SiteCommand struct {
	// Node is the machine's node id.
	Node string `json:"node"`
	// Drivers are the machine's driver bindings by concern (power, management,
	// virtual-media, ...), as the registry resolved them at enrollment. Their configs
	// carry credential references, never credentials.
	Drivers map[string]DriverBinding `json:"drivers,omitempty"`
	// Input is the step's input (its `with`), as the step defines it; for media.insert
	// the registry has resolved it to a MediaInsert.
	Input json.RawMessage `json:"input,omitempty"`
}

// MediaInsert is the input of media.insert as the site agent receives it: the https://
// URL the BMC mounts and, for a catalog image, its digest.
type MediaInsert struct {
	URL    string `json:"url"`
	Digest string `json:"digest,omitempty"`
}

// The inventory sections a site agent reports beside `images`.
const (
	// SectionSite holds a SiteInfo.
	SectionSite = "site"
	// SectionDiscoveries holds the []Discovery of PXE discovery.
	SectionDiscoveries = "discoveries"
	// SectionImages holds the cache's []ImageCacheEntry.
	SectionImages = "images"
)

// SiteInfo is a site agent's `site` inventory section.
type SiteInfo struct {
	// HTTPBase is the base URL of the site's HTTP server, as the site's machines reach
	// it: scripts at /boot/, ramdisk files at /ramdisk/, cached images at /images/sha256/.
	HTTPBase string `json:"httpBase"`
}

// Discovery is a machine the site's boot server saw network-booting without a boot
// entry: an element of the `discoveries` inventory section.
type Discovery struct {
	// MAC is the interface it booted from, lower-case, colon-separated.
	MAC string `json:"mac"`
	// ProductUUID is the SMBIOS product UUID of DHCP option 97, as dmidecode spells it;
	// empty when the machine sent none.
	ProductUUID string `json:"productUUID,omitempty"`
	// Arch is the client architecture of DHCP option 93, when the machine sent one.
	Arch *uint16 `json:"arch,omitempty"`
	// FirstSeen and LastSeen bound when it asked.
	FirstSeen time.Time `json:"firstSeen"`
	LastSeen  time.Time `json:"lastSeen"`
}
