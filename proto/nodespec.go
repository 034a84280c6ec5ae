package proto

import (
	"encoding/json"
	"fmt"
	"net"
)

// Role is what an agent is: the role its client certificate names (in the
// OrganizationalUnit) and the role a NodeSpec is written for.
type Role string

// The agent roles.
const (
	// RoleSite is the agent of a rack: boot server, image cache, BMC relay.
	RoleSite Role = "site"
	// RoleRamdisk is the agent inside the PXE-booted RAM disk that writes a machine's disk.
	RoleRamdisk Role = "ramdisk"
	// RoleNode is the agent of an installed host, which converges its host configuration.
	RoleNode Role = "node"
)

// Roles lists every role.
var Roles = []Role{RoleSite, RoleRamdisk, RoleNode}

// MachineRoles are the roles of the agents that run on a machine (its ramdisk and its
// installed OS, under one node id), in no order: every role but a site agent's.
var MachineRoles = []Role{RoleRamdisk, RoleNode}

// TakesNodeSpecs reports whether the registry pushes NodeSpecs to agents of role r, the
// only ones that acknowledge a generation: a site agent and an installed host's. A
// ramdisk is given no NodeSpec; it is told what to do by commands.
func (r Role) TakesNodeSpecs() bool { return r == RoleSite || r == RoleNode }

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool {
	for _, known := range Roles {
		if r == known {
			return true
		}
	}
	return false
}

// NodeSpec is the desired state of one agent's node, pushed over its session whenever
// Generation moves. Each role reads the sections meant for it and ignores the others;
// later capabilities add sections beside these.
type NodeSpec struct {
	// Node is the node id, the CommonName of the agent's certificate.
	Node string `json:"node"`
	// Role is the role the spec is written for.
	Role Role `json:"role"`
	// Generation counts the changes of the spec; the registry sets it, starting at 1.
	Generation int64 `json:"generation"`
	// Labels are the node's labels, against which host units' `when` is evaluated.
	Labels map[string]string `json:"labels,omitempty"`
	// Drivers binds each concern (power, management, boot, deploy, inspect, ...) to a driver.
	Drivers map[string]DriverBinding `json:"drivers,omitempty"`
	// Host is the node's host configuration: units applied in the converger's order.
	Host []HostUnit `json:"host,omitempty"`
	// Site is the rack agent's section: what to cache and how to boot each machine.
	Site *SiteSpec `json:"site,omitempty"`
}

// DriverBinding names the driver that serves a concern and its configuration.
type DriverBinding struct {
	Driver string          `json:"driver"`
	Config json.RawMessage `json:"config,omitempty"`
}

// HostUnit is one unit of host configuration: its name and its settings.
type HostUnit struct {
	// Unit is the unit's name, for example "sysctl" or "nvidia-driver".
	Unit string `json:"unit"`
	// When is a label expression; the unit applies only where it holds. Empty is always.
	When string `json:"when,omitempty"`
	// Settings are the unit's own settings, as the unit defines them.
	Settings json.RawMessage `json:"settings,omitempty"`
}

// SiteSpec is the desired state of a site agent.
type SiteSpec struct {
	// CacheImages are the images the site cache pulls and keeps.
	CacheImages []CacheImage `json:"cacheImages,omitempty"`
	// ImageSources are the host patterns of the site's `imageSources`: the site agent
	// pulls no cache image whose source is outside them, whatever CacheImages lists, and
	// its cache makes no request (a redirect, a token realm) and dials no address outside
	// them (SourceBound).
	ImageSources []string `json:"imageSources,omitempty"`
	// BootEntries say how each known machine boots.
	BootEntries []BootEntry `json:"bootEntries,omitempty"`
	// CacheKey is the registry's cache capability key (EncodeCacheKey): with it, the site's
	// cache serves an image only to a URL whose capability it or the site's own key signed;
	// without it (a registry of an earlier version), to any URL.
	CacheKey string `json:"cacheKey,omitempty"`
	// KnownMACs are the boot MACs of the machines enrolled at the site (every node of a
	// pool of the site that is not retired), sorted, at most MaxKnownMACs: the site's
	// boot server serves them as known clients whether or not a boot entry names them.
	KnownMACs []string `json:"knownMacs,omitempty"`
}

// MaxKnownMACs bounds a site's KnownMACs: at 20 bytes a MAC in JSON, 320 KiB. Beside a
// cache plan at its bound (1 MiB) the site's NodeSpec stays under 1.5 MiB, what an etcd
// cluster takes in one request by default (the registry's store writes it in one), and
// well under MaxFrame.
const MaxKnownMACs = 16384

// BootKind is how a machine boots from the site.
type BootKind string

// The boot kinds.
const (
	// BootRamdisk boots the deploy RAM disk.
	BootRamdisk BootKind = "ramdisk"
	// BootDisk tells iPXE to exit and boot the local disk.
	BootDisk BootKind = "disk"
	// BootSanboot boots an ISO from the site cache with iPXE sanboot.
	BootSanboot BootKind = "sanboot"
)

// BootEntry is how one machine, known by its MACs and product UUID, boots.
type BootEntry struct {
	// Node is the machine's node id.
	Node string `json:"node"`
	// MACs are the machine's boot interfaces, lower-case and colon-separated.
	MACs []string `json:"macs"`
	// ProductUUID is the SMBIOS product UUID (DHCP option 97), if known.
	ProductUUID string `json:"productUUID,omitempty"`
	// Kind selects one of the sections below (none for disk).
	Kind    BootKind     `json:"kind"`
	Ramdisk *RamdiskBoot `json:"ramdisk,omitempty"`
	Sanboot *Sanboot     `json:"sanboot,omitempty"`
	// SecureBoot: the machine boots with UEFI Secure Boot on, so the site hands its
	// x86-64 UEFI firmware the signed chain (shim, GRUB and a GRUB configuration)
	// rather than iPXE, which the firmware would refuse.
	SecureBoot bool `json:"secureBoot,omitempty"`
}

// RamdiskBoot is the deploy RAM disk a machine boots: its kernel and initrd, and what
// its kernel command line carries so that the ramdisk agent can join: the per-boot
// ramdisk join token, the registry's URL and its three pins.
type RamdiskBoot struct {
	// Kernel and Initrd are file names in the site's ramdisk directory (or http:// URLs);
	// empty takes the site's configured ones.
	Kernel string `json:"kernel,omitempty"`
	Initrd string `json:"initrd,omitempty"`
	// Args are further kernel arguments, after the site's own.
	Args []string `json:"args,omitempty"`
	// Token is the ramdisk join token minted for this boot (bc.token=).
	Token string `json:"token"`
	// Registry is the registry's base URL the ramdisk joins (bc.registry=).
	Registry string `json:"registry"`
	// Pins are the registry's three pins, sha256/<base64> each (bc.pins=).
	Pins []string `json:"pins"`
	// Extras are extra initrds from the site's cache, appended after Initrd in order.
	Extras []RamdiskExtra `json:"extras,omitempty"`
}

// Sanboot is an ISO booted from the site cache by digest.
type Sanboot struct {
	Image string `json:"image"`
}

// Validate returns the first problem of the spec as INVALID_CONFIG with the path of the
// offending field, or nil.
func (s *NodeSpec) Validate() error {
	bad := func(path, format string, args ...any) error {
		return Errorf(InvalidConfig, format, args...).WithPath(path)
	}
	if err := CheckNodeID(s.Node); err != nil {
		return bad("node", "%s", AsError(err).Message)
	}
	if !s.Role.Valid() {
		return bad("role", "role %q: use site, ramdisk or node", s.Role)
	}
	if s.Generation < 0 {
		return bad("generation", "generation %d is negative", s.Generation)
	}
	for concern, b := range s.Drivers {
		if b.Driver == "" {
			return bad("drivers."+concern+".driver", "name the driver of concern %q", concern)
		}
	}
	for i, u := range s.Host {
		if u.Unit == "" {
			return bad(fmt.Sprintf("host[%d].unit", i), "name the unit")
		}
	}
	if s.Site == nil {
		return nil
	}
	for i, c := range s.Site.CacheImages {
		p := fmt.Sprintf("site.cacheImages[%d]", i)
		switch {
		case c.Ref == "":
			return bad(p+".ref", "name the image")
		case !digest.MatchString(c.Digest):
			return bad(p+".digest", "digest %q: use the SHA-256 as 64 lower-case hex digits", c.Digest)
		case c.Source == "":
			return bad(p+".source", "give the URL the cache pulls from")
		}
	}
	if len(s.Site.KnownMACs) > MaxKnownMACs {
		return bad("site.knownMacs", "%d known MACs: a site knows at most %d", len(s.Site.KnownMACs), MaxKnownMACs)
	}
	for i, m := range s.Site.KnownMACs {
		p := fmt.Sprintf("site.knownMacs[%d]", i)
		if err := checkMAC(m); err != nil {
			return bad(p, "%s", AsError(err).Message)
		}
		if i > 0 && m <= s.Site.KnownMACs[i-1] {
			return bad(p, "MAC %q: list the known MACs sorted, each once", m)
		}
	}
	for i, e := range s.Site.BootEntries {
		if err := e.validate(fmt.Sprintf("site.bootEntries[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

// Check returns the first problem of a boot entry as INVALID_INPUT with the path of the
// offending field, or nil.
func (e *BootEntry) Check() error {
	if err := e.validate("bootEntry"); err != nil {
		pe := AsError(err)
		return Errorf(InvalidInput, "%s", pe.Message).WithPath(pe.Details.Path)
	}
	return nil
}

func (e *BootEntry) validate(p string) error {
	bad := func(path, format string, args ...any) error {
		return Errorf(InvalidConfig, format, args...).WithPath(p + path)
	}
	if len(e.MACs) == 0 {
		return bad(".macs", "give at least one MAC")
	}
	for j, m := range e.MACs {
		if err := checkMAC(m); err != nil {
			return bad(fmt.Sprintf(".macs[%d]", j), "%s", AsError(err).Message)
		}
	}
	switch e.Kind {
	case BootRamdisk:
		if e.Ramdisk == nil || e.Ramdisk.Token == "" || e.Ramdisk.Registry == "" || len(e.Ramdisk.Pins) != 3 {
			return bad(".ramdisk", "a ramdisk entry needs the ramdisk's token, the registry's URL and its three pins")
		}
		for j, x := range e.Ramdisk.Extras {
			if !digest.MatchString(x.Digest) {
				return bad(fmt.Sprintf(".ramdisk.extras[%d].digest", j), "extra initrd %q: its digest %q is not 64 lower-case hex digits", x.Ref, x.Digest)
			}
		}
	case BootSanboot:
		if e.Sanboot == nil || !digest.MatchString(e.Sanboot.Image) {
			return bad(".sanboot", "a sanboot entry needs the ISO's digest")
		}
	case BootDisk:
	default:
		return bad(".kind", "boot kind %q: use ramdisk, disk or sanboot", e.Kind)
	}
	return nil
}

// checkMAC refuses a MAC not in its canonical form (lower-case hex pairs separated by
// colons), as INVALID_CONFIG.
func checkMAC(m string) error {
	if hw, err := net.ParseMAC(m); err != nil || hw.String() != m {
		return Errorf(InvalidConfig, "MAC %q: use lower-case hex pairs separated by colons", m)
	}
	return nil
}
