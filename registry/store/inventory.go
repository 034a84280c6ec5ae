package store

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/better-compute/better-compute/proto"
)

const bucketInventory = "agent-inventory"

// InventorySection is one section of the inventory a node's agent reported (images,
// system, nics, ...), as the agent sent it, in compact JSON.
type InventorySection struct {
	Node      string          `json:"node"`
	Section   string          `json:"section"`
	Data      json.RawMessage `json:"data"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

func inventoryKey(node, section string) []byte { return []byte(node + "/" + section) }

// PutInventory stores one section of a node's inventory and reports whether it differs
// from what was stored; an unchanged section is not written.
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
	var old InventorySection
	ok, err := t.get(bucketInventory, inventoryKey(node, section), &old)
	if err != nil || ok && bytes.Equal(old.Data, compact.Bytes()) {
		return false, err
	}
	rec := InventorySection{Node: node, Section: section, Data: compact.Bytes(), UpdatedAt: t.now}
	return true, t.put(bucketInventory, inventoryKey(node, section), rec)
}

// Inventory returns every section a node's agent reported, ordered by name.
func (t *Tx) Inventory(node string) ([]InventorySection, error) {
	var out []InventorySection
	prefix := []byte(node + "/")
	c := t.kv.cursor(bucketInventory)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var s InventorySection
		if err := decode(bucketInventory, k, v, &s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// SiteInventory is the `site` section a site agent reported, zero when it reported none
// (or one that does not decode).
func (t *Tx) SiteInventory(node string) (proto.SiteInventory, error) {
	var s InventorySection
	var si proto.SiteInventory
	ok, err := t.get(bucketInventory, inventoryKey(node, proto.SectionSite), &s)
	if ok && json.Unmarshal(s.Data, &si) != nil {
		si = proto.SiteInventory{}
	}
	return si, err
}
