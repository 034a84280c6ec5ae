package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/klauspost/compress/zstd"
)

const bucketInventory = "agent-inventory"

// MaxInventoryBytes bounds one stored inventory section: its record as written, the
// section compressed when that makes it smaller. It is what one etcd transaction of the
// default --max-request-bytes (1.5 MiB) takes beside its keys, compares and the rest of a
// section's transaction, and it holds on both backends alike, so a site behaves the same
// whichever store its registry runs on. A site agent's sections at their budgets (1.5 MiB
// of images at most) fit compressed unless their entries are as good as random.
const MaxInventoryBytes = 1 << 20

// compressInventoryFrom is the size of a section's JSON from which it is stored
// compressed (when that is smaller): below it the record stays readable as it is.
const compressInventoryFrom = 4 << 10

// maxInventoryDecoded bounds a stored section decompressed: what an agent frame holds.
const maxInventoryDecoded = proto.MaxFrame

// InventorySection is one section of the inventory a node's agent reported (images,
// system, nics, ...), as the agent sent it, in compact JSON.
type InventorySection struct {
	Node      string          `json:"node"`
	Section   string          `json:"section"`
	Data      json.RawMessage `json:"data"`
	UpdatedAt time.Time       `json:"updatedAt"`
	// Refused, when set, says the agent's latest report of the section was refused
	// (larger than MaxInventoryBytes, stored): Data is the copy stored before it (JSON
	// null when there was none).
	Refused *InventoryRefusal `json:"refused,omitempty"`
}

// InventoryRefusal is a report of a section the store refused for its size.
type InventoryRefusal struct {
	// At is when it was refused; Bytes is the size of the section's JSON as reported.
	At    time.Time `json:"at"`
	Bytes int       `json:"bytes"`
}

// inventoryRecord is an InventorySection as stored: its data as JSON, or compressed
// with zstd (Zstd) when that is smaller.
type inventoryRecord struct {
	Node      string            `json:"node"`
	Section   string            `json:"section"`
	Data      json.RawMessage   `json:"data,omitempty"`
	Zstd      []byte            `json:"zstd,omitempty"`
	UpdatedAt time.Time         `json:"updatedAt"`
	Refused   *InventoryRefusal `json:"refused,omitempty"`
}

var (
	inventoryEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
		return e
	})
	inventoryDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxInventoryDecoded))
		return d
	})
)

// record is s as stored: compressed when its data is large and compresses.
func (s InventorySection) record() inventoryRecord {
	rec := inventoryRecord{Node: s.Node, Section: s.Section, Data: s.Data, UpdatedAt: s.UpdatedAt, Refused: s.Refused}
	if len(s.Data) >= compressInventoryFrom {
		// Stored as base64 in the record's JSON: worth it only when that is smaller.
		if z := inventoryEncoder().EncodeAll(s.Data, nil); (len(z)+2)/3*4 < len(s.Data) {
			rec.Data, rec.Zstd = nil, z
		}
	}
	return rec
}

// section is the record as the store's readers see it, decompressed.
func (r inventoryRecord) section() (InventorySection, error) {
	s := InventorySection{Node: r.Node, Section: r.Section, Data: r.Data, UpdatedAt: r.UpdatedAt, Refused: r.Refused}
	if r.Zstd != nil {
		data, err := inventoryDecoder().DecodeAll(r.Zstd, nil)
		if err != nil {
			return s, fmt.Errorf("store: inventory section %s of %s does not decompress: %w", r.Section, r.Node, err)
		}
		s.Data = data
	}
	if s.Data == nil {
		s.Data = json.RawMessage("null")
	}
	return s, nil
}

func inventoryKey(node, section string) []byte { return []byte(node + "/" + section) }

// putSection writes s, refusing (INVALID_INPUT at inventory.<section>) a record over
// MaxInventoryBytes.
func (t *Tx) putSection(s InventorySection, reported int) error {
	rec, err := json.Marshal(s.record())
	if err != nil {
		return err
	}
	if 1+len(rec) > MaxInventoryBytes {
		return proto.Errorf(proto.InvalidInput, "inventory section %s of %s takes %d bytes stored (%d reported), more than the %d a section may take; the copy stored before stays",
			s.Section, s.Node, 1+len(rec), reported, MaxInventoryBytes).WithPath("inventory." + s.Section)
	}
	return t.putRaw(bucketInventory, inventoryKey(s.Node, s.Section), append([]byte{schemaVersion}, rec...))
}

// section reads one stored section; false when there is none.
func (t *Tx) section(node, section string) (InventorySection, bool, error) {
	var rec inventoryRecord
	ok, err := t.get(bucketInventory, inventoryKey(node, section), &rec)
	if err != nil || !ok {
		return InventorySection{}, false, err
	}
	s, err := rec.section()
	return s, err == nil, err
}

// PutInventory stores one section of a node's inventory and reports whether it differs
// from what was stored; an unchanged section is not written (but for clearing the mark
// of a refused report, RefuseInventory). A section whose record would be larger than
// MaxInventoryBytes is INVALID_INPUT at inventory.<section> and
// changes nothing.
func (t *Tx) PutInventory(node, section string, data json.RawMessage) (changed bool, err error) {
	if err := proto.CheckNodeID(node); err != nil {
		return false, err
	}
	if section == "" {
		return false, proto.Errorf(proto.InvalidInput, "name the inventory section").WithPath("section")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return false, proto.Errorf(proto.InvalidInput, "inventory section %q of node %q is not JSON: %v", section, node, err).WithPath("data")
	}
	old, ok, err := t.section(node, section)
	if err != nil {
		return false, err
	}
	if ok && bytes.Equal(old.Data, compact.Bytes()) {
		if old.Refused == nil {
			return false, nil
		}
		old.Refused = nil // the copy stored is the agent's latest again
		return false, t.putSection(old, len(data))
	}
	return true, t.putSection(InventorySection{Node: node, Section: section, Data: compact.Bytes(), UpdatedAt: t.now}, len(data))
}

// RefuseInventory marks a node's section as refused (PutInventory's INVALID_INPUT for
// its size): the copy stored before stays, with when and how large the refused report
// was; with none stored, the mark alone (data null). The section's next report that
// is stored clears it.
func (t *Tx) RefuseInventory(node, section string, reported int) error {
	if err := proto.CheckNodeID(node); err != nil {
		return err
	}
	s, ok, err := t.section(node, section)
	if err != nil {
		return err
	}
	if !ok {
		s = InventorySection{Node: node, Section: section, Data: json.RawMessage("null"), UpdatedAt: t.now}
	}
	s.Refused = &InventoryRefusal{At: t.now, Bytes: reported}
	return t.putSection(s, reported)
}

// Inventory returns every section a node's agent reported, ordered by name.
func (t *Tx) Inventory(node string) ([]InventorySection, error) {
	var out []InventorySection
	prefix := []byte(node + "/")
	c := t.kv.cursor(bucketInventory)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var rec inventoryRecord
		if err := decode(bucketInventory, k, v, &rec); err != nil {
			return nil, err
		}
		s, err := rec.section()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// SiteInventory is the `site` section a site agent reported, zero when it reported none
// (or one that does not decode).
func (t *Tx) SiteInventory(node string) (proto.SiteInventory, error) {
	var si proto.SiteInventory
	s, ok, err := t.section(node, proto.SectionSite)
	if ok && json.Unmarshal(s.Data, &si) != nil {
		si = proto.SiteInventory{}
	}
	return si, err
}
