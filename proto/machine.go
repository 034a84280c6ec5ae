package proto

import "encoding/json"

// SiteCommand is the payload of every command relayed to a site agent: the machine it
// acts on and the step's input.
type SiteCommand struct {
	// Node is the machine's node id.
	Node string `json:"node"`
	// Drivers are the machine's driver bindings by concern (power, management, ...),
	// with the BMC's address and credential reference in their config.
	Drivers map[string]DriverBinding `json:"drivers,omitempty"`
	// Input is the step's input: its `with`, or PrepareRamdisk for boot.prepareRamdisk.
	Input json.RawMessage `json:"input,omitempty"`
	// Credential is the login of the machine's BMC for this one command: the registry
	// resolves the bindings' credential reference in its secret store and attaches it as
	// it sends the command on the agent's stream (it is never stored with the command).
	// Nil for a command that does not reach the BMC, or a BMC that takes no credential.
	Credential *BMCCredential `json:"credential,omitempty"`
}

// MaxSiteCommandSeconds bounds how long a site agent runs one relayed command that
// reaches a BMC: 30 minutes, media.insert's step timeout, the longest of the site
// steps'. A step given a longer timeout (Command.TimeoutSeconds) has its site command
// end at this bound all the same, and so does a command that names none.
const MaxSiteCommandSeconds = 30 * 60

// PrepareRamdisk is the input of boot.prepareRamdisk: the site makes the machine's boot
// entry a ramdisk boot whose kernel command line is Args, then bc.registry=Registry,
// bc.pins=Pins (comma-separated) and bc.token=Token.
type PrepareRamdisk struct {
	// MACs are the machine's boot interfaces; ProductUUID its SMBIOS product UUID.
	MACs        []string `json:"macs"`
	ProductUUID string   `json:"productUuid,omitempty"`
	// Kernel and Initrd name the ramdisk to boot (digests in the site cache); empty
	// boots the site's own ramdisk.
	Kernel string `json:"kernel,omitempty"`
	Initrd string `json:"initrd,omitempty"`
	// Token is the single-use ramdisk join token minted for this boot.
	Token string `json:"token"`
	// Registry is the registry's base URL the ramdisk joins, https://host:port.
	Registry string `json:"registry"`
	// Pins are the registry's serving CA, join signing and join encryption pins, in
	// that order.
	Pins []string `json:"pins"`
	// Args are further kernel arguments; they carry bc.node=<node id>.
	Args []string `json:"args,omitempty"`
	// Extras are the extra initrds the boot appends after the ramdisk's own, in order:
	// the pool's policy.ramdiskExtras, each a verified catalog image of kind ramdisk the
	// site's cache holds.
	Extras []RamdiskExtra `json:"extras,omitempty"`
	// SecureBoot: the machine boots with UEFI Secure Boot on (its pool's
	// policy.secureBoot), so the site boots it through the signed chain.
	SecureBoot bool `json:"secureBoot,omitempty"`
}

// RamdiskExtra is an extra initrd of a ramdisk boot: a catalog image of kind ramdisk,
// served from the site's cache by its digest.
type RamdiskExtra struct {
	// Ref is the catalog ref the pool names, for the operator to read.
	Ref string `json:"ref"`
	// Digest is the image's SHA-256, 64 lower-case hex digits.
	Digest string `json:"digest"`
}

// InventoryRefresh is the input of inventory.refresh: the identity the registry enrolled
// the machine with, which the ramdisk checks against the machine it runs on
// (CheckIdentity) before it reports anything.
type InventoryRefresh struct {
	ProductUUID string `json:"productUuid,omitempty"`
	// MAC is the MAC PXE discovery bound, if it bound one.
	MAC string `json:"mac,omitempty"`
}

// The inventory sections the deploy reads beside images.
const (
	// SectionSite is a site agent's own description: SiteInventory.
	SectionSite = "site"
	// SectionHost is a node agent's last host convergence: HostInventory.
	SectionHost = "host"
)

// SiteInventory is the `site` inventory section of a site agent.
type SiteInventory struct {
	// HTTPBase is the base URL of the site's HTTP server as machines reach it,
	// http://host:port; the cache serves an image at HTTPBase/images/sha256/<digest>.
	HTTPBase string `json:"httpBase"`
	// CacheCapacityBytes is what the site cache can hold: its capacity
	// (cache.capacityBytes), or what its filesystem lets it hold (the bytes it takes
	// there and the free space, less cache.reserveBytes) when that is less, rounded down
	// and held steady as the site reports it (docs/site.md). 0, and a site that reports
	// none (an older one), is no bound; a cache that can hold nothing reports 1. The
	// registry plans the site's pre-warm images within it.
	CacheCapacityBytes int64 `json:"cacheCapacityBytes,omitempty"`
	// CacheConfiguredCapacityBytes is cache.capacityBytes as configured, for the
	// operator to read beside CacheCapacityBytes; absent when 0 (no bound).
	CacheConfiguredCapacityBytes int64 `json:"cacheConfiguredCapacityBytes,omitempty"`
	// Omitted counts, by section name, the entries a site agent left out of a section
	// it cut to that section's byte budget, so that every report fits its agent frame
	// (proto.MaxFrame) whatever the site holds; a section not named is whole. A site
	// sends this section before the cut one it counts.
	Omitted map[string]int `json:"omitted,omitempty"`
}

// SectionCut reports whether a site agent's `site` section says it cut section.
func (s SiteInventory) SectionCut(section string) bool { return s.Omitted[section] > 0 }

// HostInventory is the `host` inventory section of a node agent: the generation it
// converged last and what each unit did.
type HostInventory struct {
	Generation int64             `json:"generation"`
	Units      []json.RawMessage `json:"units"`
}
