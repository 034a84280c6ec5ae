package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/sectionpack"
)

const bucketInventory = "agent-inventory"

// InventorySection is one section of the inventory a node's agent reported (images,
// system, nics, ...), as the agent sent it, in compact JSON.
type InventorySection struct {
	Node      string          `json:"node"`
	Section   string          `json:"section"`
	Data      json.RawMessage `json:"data"`
	UpdatedAt time.Time       `json:"updatedAt"`
	// Refused, when set, says the agent's latest report of the section was refused
	// (larger than proto.MaxInventoryRecord, stored): Data is the copy stored before it (JSON
	// null when there was none).
	Refused *InventoryRefusal `json:"refused,omitempty"`
}

// InventoryRefusal is a report of a section the store refused for its size.
type InventoryRefusal struct {
	// At is when it was refused; Bytes is the size of the section's JSON as reported.
	At    time.Time `json:"at"`
	Bytes int       `json:"bytes"`
	// LeftOut counts the entries of the copy stored before that were left out so that
	// the copy takes the mark: a record an earlier release stored within markRoom of
	// proto.MaxInventoryRecord keeps the first entries of its list that fit beside the
	// mark, as a site agent cuts a section to its budget (a copy that is not a list is
	// left out whole, its data null, LeftOut 1). 0 for a copy kept whole.
	LeftOut int `json:"leftOut,omitempty"`
}

// inventoryRecord is an InventorySection as stored: its data in its stored form
// (sectionpack: as JSON, or compressed when that is smaller).
type inventoryRecord struct {
	Node    string `json:"node"`
	Section string `json:"section"`
	sectionpack.Packed
	UpdatedAt time.Time         `json:"updatedAt"`
	Refused   *InventoryRefusal `json:"refused,omitempty"`
}

// record is s as stored.
func (s InventorySection) record() inventoryRecord {
	return inventoryRecord{Node: s.Node, Section: s.Section, Packed: sectionpack.Pack(s.Data), UpdatedAt: s.UpdatedAt, Refused: s.Refused}
}

// section is the record as the store's readers see it, decompressed.
func (r inventoryRecord) section() (InventorySection, error) {
	s := InventorySection{Node: r.Node, Section: r.Section, UpdatedAt: r.UpdatedAt, Refused: r.Refused}
	data, err := sectionpack.Unpack(r.Packed)
	if err != nil {
		return s, fmt.Errorf("store: inventory section %s of %s does not decompress: %w", r.Section, r.Node, err)
	}
	if s.Data = data; s.Data == nil {
		s.Data = json.RawMessage("null")
	}
	return s, nil
}

func inventoryKey(node, section string) []byte { return []byte(node + "/" + section) }

// markRoom is the most the mark of a refused report adds to a record (its "refused"
// field), at the longest time and count JSON writes: a record without a mark is stored
// only with this room left under proto.MaxInventoryRecord, so that RefuseInventory can
// always mark the copy stored.
var markRoom = func() int {
	longest := InventoryRefusal{At: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(23*60+59)*60)), Bytes: math.MinInt}
	marked, errM := proto.Marshal(inventoryRecord{Refused: &longest})
	unmarked, errU := proto.Marshal(inventoryRecord{})
	if err := errors.Join(errM, errU); err != nil {
		panic(err)
	}
	return len(marked) - len(unmarked)
}()

// size is what s's record takes as stored (its schema byte, then its JSON), and the
// record's JSON.
func (s InventorySection) size() (int, []byte, error) {
	rec, err := proto.Marshal(s.record())
	return 1 + len(rec), rec, err
}

// putSection writes s, refusing (INVALID_INPUT at inventory.<section>) a record over
// proto.MaxInventoryRecord, or, without a mark, one that leaves no markRoom under it.
func (t *Tx) putSection(s InventorySection, reported int) error {
	size, rec, err := s.size()
	if err != nil {
		return err
	}
	if s.Refused == nil {
		size += markRoom
	}
	if size > proto.MaxInventoryRecord {
		return proto.Errorf(proto.InvalidInput, "inventory section %s of %s takes %d bytes stored with the mark of a refused report or the room kept for one (%d reported), more than the %d a section may take; the copy stored before stays",
			s.Section, s.Node, size, reported, proto.MaxInventoryRecord).WithPath("inventory." + s.Section)
	}
	return t.putRaw(bucketInventory, inventoryKey(s.Node, s.Section), append([]byte{schemaVersion}, rec...))
}

// InventorySection reads one section a node's agent reported; false when there is none.
func (t *Tx) InventorySection(node, section string) (InventorySection, bool, error) {
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
// of a refused report, RefuseInventory). A section whose record, with room kept for
// that mark (markRoom), would be larger than proto.MaxInventoryRecord is INVALID_INPUT
// at inventory.<section> and changes nothing; one whose stored form fits
// sectionpack.MaxData is always stored. A section not named as proto.CheckSectionName
// takes is INVALID_INPUT at section.
func (t *Tx) PutInventory(node, section string, data json.RawMessage) (changed bool, err error) {
	if err := proto.CheckNodeID(node); err != nil {
		return false, err
	}
	if err := proto.CheckSectionName(section); err != nil {
		return false, proto.AsError(err).WithPath("section")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return false, proto.Errorf(proto.InvalidInput, "inventory section %q of node %q is not JSON: %v", section, node, err).WithPath("data")
	}
	old, ok, err := t.InventorySection(node, section)
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
	if err := proto.CheckSectionName(section); err != nil {
		return proto.AsError(err).WithPath("section")
	}
	s, ok, err := t.InventorySection(node, section)
	if err != nil {
		return err
	}
	if !ok {
		s = InventorySection{Node: node, Section: section, Data: json.RawMessage("null"), UpdatedAt: t.now}
	}
	s.Refused = &InventoryRefusal{At: t.now, Bytes: reported}
	if s, err = cutForMark(s); err != nil {
		return err
	}
	return t.putSection(s, reported)
}

// cutForMark is s, marked, within proto.MaxInventoryRecord: as it is when it fits (every
// copy this release stores leaves markRoom), else, a record an earlier release stored
// that left less, the first entries of its list that fit beside the mark, the mark
// counting those left out (InventoryRefusal.LeftOut); a copy that is not a list is left
// out whole (data null).
func cutForMark(s InventorySection) (InventorySection, error) {
	if size, _, err := s.size(); err != nil || size <= proto.MaxInventoryRecord {
		return s, err
	}
	var entries []json.RawMessage
	if json.Unmarshal(s.Data, &entries) != nil {
		s.Data, s.Refused.LeftOut = json.RawMessage("null"), 1
		return s, nil
	}
	keep := func(n int) InventorySection {
		c := s
		refused := *s.Refused
		refused.LeftOut = len(entries) - n
		var list bytes.Buffer
		list.WriteByte('[')
		for i, e := range entries[:n] {
			if i > 0 {
				list.WriteByte(',')
			}
			list.Write(e)
		}
		list.WriteByte(']')
		c.Data, c.Refused = list.Bytes(), &refused
		return c
	}
	// keep(lo) fits (none kept, "[]", always does), keep(hi) does not.
	lo, hi := 0, len(entries)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		size, _, err := keep(mid).size()
		if err != nil {
			return s, err
		}
		if size <= proto.MaxInventoryRecord {
			lo = mid
		} else {
			hi = mid
		}
	}
	return keep(lo), nil
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
	s, ok, err := t.InventorySection(node, proto.SectionSite)
	if ok && json.Unmarshal(s.Data, &si) != nil {
		si = proto.SiteInventory{}
	}
	return si, err
}
