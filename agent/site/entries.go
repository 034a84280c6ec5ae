package site

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/cache"
	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
)

// entries is how the site boots each machine, as the boot server asks for it, by MAC.
// Two sources: the standing entries of the site's NodeSpec, replaced whole on every
// spec, and the entries the relayed steps set (boot.prepareRamdisk, a sanboot for
// media.insert, removed by boot.cleanUp and media.eject), which win for their machine
// and are kept in a state file so that a restarted site boots the same way.
type entries struct {
	ramdisk  RamdiskConfig
	httpBase string
	file     string // the relayed entries' state file
	// caps signs the capabilities of the cache URLs in the boot server's entries; nil
	// leaves them out.
	caps *capSigner

	mu       sync.RWMutex
	standing []proto.BootEntry
	relayed  map[string]proto.BootEntry // by node
	byMAC    map[string]proto.BootEntry
	// enrolledMACs are the NodeSpec's knownMacs: the machines enrolled at the site,
	// known to the boot server's DHCP with or without an entry.
	enrolledMACs map[string]bool
}

// openEntries loads the relayed entries from file, if it exists.
func openEntries(file string, ramdisk RamdiskConfig, httpBase string) (*entries, error) {
	t := &entries{ramdisk: ramdisk, httpBase: httpBase, file: file, relayed: map[string]proto.BootEntry{}}
	data, err := os.ReadFile(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		var list []proto.BootEntry
		if err := (jsondoc.Decoder{Name: file, File: true, Code: proto.InvalidConfig}).Decode(data, &list); err != nil {
			e := proto.AsError(err)
			return nil, proto.Errorf(proto.InvalidConfig, "boot entries file %s (remove the file to start without relayed entries)", e.Message).WithPath(e.Details.Path)
		}
		for i, e := range list {
			if err := e.Check(); err != nil {
				pe := proto.AsError(err)
				return nil, proto.Errorf(proto.InvalidConfig, "boot entries file %s: entry %d: %s (remove the file to start without relayed entries)", file, i, pe.Message).
					WithPath(fmt.Sprintf("[%d]%s", i, strings.TrimPrefix(pe.Details.Path, "bootEntry")))
			}
			t.relayed[e.Node] = e
		}
	}
	t.rebuild()
	return t, nil
}

// Entry is boot.Entries: the machine's entry, its cache URLs with capabilities minted
// now, since the boot server renders a script from it for each request.
func (t *entries) Entry(mac net.HardwareAddr) (boot.Entry, bool) {
	t.mu.RLock()
	pe, ok := t.byMAC[mac.String()]
	t.mu.RUnlock()
	if !ok {
		return boot.Entry{}, false
	}
	return t.convert(pe), true
}

// Has is boot.Entries: whether an entry names mac, without building the entry.
func (t *entries) Has(mac net.HardwareAddr) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := t.byMAC[mac.String()]
	return ok
}

// kind is the kind of the entry node boots with now; "" when it has none.
func (t *entries) kind(node string) proto.BootKind {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if e, ok := t.relayed[node]; ok {
		return e.Kind
	}
	for _, e := range t.standing {
		if e.Node == node {
			return e.Kind
		}
	}
	return ""
}

// relayedKind is the kind of node's relayed entry; "" when it has none.
func (t *entries) relayedKind(node string) proto.BootKind {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.relayed[node].Kind
}

// identity is the MACs and product UUID the site knows node by, from its entries, and
// whether it boots under Secure Boot.
func (t *entries) identity(node string) (macs []string, uuid string, secureBoot bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if e, ok := t.relayed[node]; ok {
		return e.MACs, e.ProductUUID, e.SecureBoot
	}
	for _, e := range t.standing {
		if e.Node == node {
			return e.MACs, e.ProductUUID, e.SecureBoot
		}
	}
	return nil, "", false
}

// enrolled is boot.Deps.Enrolled: whether the NodeSpec's knownMacs list mac.
func (t *entries) enrolled(mac net.HardwareAddr) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.enrolledMACs[mac.String()]
}

// setEnrolled makes macs the NodeSpec's knownMacs.
func (t *entries) setEnrolled(macs []string) {
	set := make(map[string]bool, len(macs))
	for _, m := range macs {
		set[m] = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.enrolledMACs = set
}

// setStanding makes list the NodeSpec's entries.
func (t *entries) setStanding(list []proto.BootEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.standing = list
	t.rebuild()
}

// setRelayed sets node's relayed entry (nil removes it) and writes the state file
// before the boot server sees the change.
func (t *entries) setRelayed(node string, e *proto.BootEntry) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, had := t.relayed[node]
	if e == nil {
		delete(t.relayed, node)
	} else {
		t.relayed[node] = *e
	}
	if err := t.save(); err != nil {
		if had {
			t.relayed[node] = old
		} else {
			delete(t.relayed, node)
		}
		return err
	}
	t.rebuild()
	return nil
}

// save writes the relayed entries; t.mu is held.
func (t *entries) save() error {
	list := t.relayedList()
	var data bytes.Buffer
	enc := proto.NewEncoder(&data)
	enc.SetIndent("", "  ")
	if err := enc.Encode(list); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(t.file, data.Bytes(), 0o600)
}

func (t *entries) relayedList() []proto.BootEntry {
	list := make([]proto.BootEntry, 0, len(t.relayed))
	for _, node := range slices.Sorted(maps.Keys(t.relayed)) {
		list = append(list, t.relayed[node])
	}
	return list
}

// section is the `bootEntries` inventory section: every entry in effect, standing ones
// a relayed one overrides left out, ramdisk tokens left out, by node, cut to its budget
// after the nodes that sort first; and the number of entries left out. An entry names
// no tenant, so the entries kept are the first nodes by id, whoever's they are.
func (t *entries) section() (json.RawMessage, int) {
	t.mu.RLock()
	list := t.relayedList()
	for _, e := range t.standing {
		if _, over := t.relayed[e.Node]; !over {
			list = append(list, e)
		}
	}
	t.mu.RUnlock()
	slices.SortFunc(list, func(a, b proto.BootEntry) int { return strings.Compare(a.Node, b.Node) })
	for i, e := range list {
		if e.Ramdisk != nil {
			r := *e.Ramdisk
			r.Token = ""
			list[i].Ramdisk = &r
		}
	}
	return cut(list, bootEntriesBudget)
}

// rebuild makes the by-MAC table; t.mu is held.
func (t *entries) rebuild() {
	byMAC := map[string]proto.BootEntry{}
	for _, pe := range t.standing {
		if _, over := t.relayed[pe.Node]; !over {
			t.add(byMAC, pe)
		}
	}
	for _, pe := range t.relayed {
		t.add(byMAC, pe)
	}
	t.byMAC = byMAC
}

func (t *entries) add(byMAC map[string]proto.BootEntry, pe proto.BootEntry) {
	for _, mac := range pe.MACs {
		byMAC[mac] = pe
	}
}

// convert is the boot server's entry for a checked entry.
func (t *entries) convert(pe proto.BootEntry) boot.Entry {
	e := t.convertKind(pe)
	e.SecureBoot = pe.SecureBoot
	return e
}

// convertKind is the boot server's entry of pe's kind.
func (t *entries) convertKind(pe proto.BootEntry) boot.Entry {
	switch pe.Kind {
	case proto.BootRamdisk:
		r := pe.Ramdisk
		return boot.Entry{Kind: boot.KindRamdisk, Ramdisk: boot.Ramdisk{
			Kernel: t.ramdiskFile(r.Kernel, t.ramdisk.Kernel), Initrd: t.ramdiskFile(r.Initrd, t.ramdisk.Initrd),
			Token: r.Token, Registry: r.Registry, Pins: r.Pins,
			Args:   append(slices.Clone(t.ramdisk.Args), r.Args...),
			Extras: t.extraURLs(r.Extras),
		}}
	case proto.BootSanboot:
		return boot.Entry{Kind: boot.KindSanboot, ISO: t.cacheURL(pe.Sanboot.Image)}
	default:
		return boot.Entry{Kind: boot.KindDisk}
	}
}

// ramdiskFile is a ramdisk file as the boot server takes it: a digest is the site cache's
// copy, a name a file of the ramdisk directory, empty the configured default.
func (t *entries) ramdiskFile(name, def string) string {
	switch {
	case name == "":
		return def
	case proto.IsDigest(name):
		return t.cacheURL(name)
	}
	return name
}

// extraURLs are the site cache's URLs of a ramdisk boot's extra initrds, in order.
func (t *entries) extraURLs(extras []proto.RamdiskExtra) []string {
	var urls []string
	for _, x := range extras {
		urls = append(urls, t.cacheURL(x.Digest))
	}
	return urls
}

// cacheURL is the site cache's URL of digest, with a capability when t.caps is set.
func (t *entries) cacheURL(digest string) string {
	url := strings.TrimSuffix(t.httpBase, "/") + cache.ImagePathPrefix + digest
	if t.caps == nil {
		return url
	}
	return t.caps.url(url, digest)
}
