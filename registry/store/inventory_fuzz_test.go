package store

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// FuzzPutInventory stores any section an agent reports, under any name, and reads the
// node's inventory back: a refusal is INVALID_INPUT at section, data or the section's
// inventory path, and leaves the copy stored before; an accepted section reads back as
// the agent sent it (compacted), a second report of it changes nothing, and the mark of
// a refused report beside it reads back too.
func FuzzPutInventory(f *testing.F) {
	s, err := Open(f.TempDir(), Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	f.Add("site", []byte(`{"httpBase":"http://10.0.0.1"}`))
	f.Add("images", []byte(`[{"digest":"aa","state":"ready"}]`))
	f.Add("gpus", []byte(`[ {"uuid": "GPU-1"} , 2 ]`))
	f.Add("Bad/Name", []byte(`{}`))
	f.Add("host", []byte(`{"a":`))
	f.Add("x", []byte("\"\xff\""))
	f.Fuzz(func(t *testing.T, section string, data []byte) {
		read := func() (InventorySection, bool) {
			var inv []InventorySection
			if err := s.View(func(tx *Tx) (err error) { inv, err = tx.Inventory("n1"); return err }); err != nil {
				t.Fatalf("the inventory does not read back: %v", err)
			}
			for _, sec := range inv {
				if sec.Section == section {
					return sec, true
				}
			}
			return InventorySection{}, false
		}
		before, had := read()
		err := s.Update(func(tx *Tx) error { _, err := tx.PutInventory("n1", section, data); return err })
		if err != nil {
			e := proto.AsError(err)
			if e.Code != proto.InvalidInput || (e.Details.Path != "section" && e.Details.Path != "data" && e.Details.Path != "inventory."+section) {
				t.Fatalf("refused with %v at %q", err, e.Details.Path)
			}
			if after, has := read(); has != had || !bytes.Equal(after.Data, before.Data) {
				t.Fatalf("a refused report changed the copy stored from %q to %q", before.Data, after.Data)
			}
			return
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, data); err != nil {
			t.Fatalf("%q stored, not JSON: %v", data, err)
		}
		got, ok := s.viewSection(t, section)
		if !ok || !bytes.Equal(got.Data, compact.Bytes()) || got.Refused != nil {
			t.Fatalf("%s reported as %q reads back as %q (%v, refused %+v)", section, compact.Bytes(), got.Data, ok, got.Refused)
		}
		var changed bool
		if err := s.Update(func(tx *Tx) (err error) { changed, err = tx.PutInventory("n1", section, data); return err }); err != nil || changed {
			t.Fatalf("the same report again: changed %v, %v", changed, err)
		}
		if err := s.Update(func(tx *Tx) error { return tx.RefuseInventory("n1", section, len(data)) }); err != nil {
			t.Fatalf("a refusal beside %q: %v", data, err)
		}
		if got, ok := s.viewSection(t, section); !ok || got.Refused == nil || (got.Refused.LeftOut == 0 && !bytes.Equal(got.Data, compact.Bytes())) {
			t.Fatalf("marked refused, %s reads back as %q (refused %+v)", section, got.Data, got.Refused)
		}
	})
}

// viewSection reads node n1's section.
func (s *Store) viewSection(t *testing.T, section string) (sec InventorySection, ok bool) {
	if err := s.View(func(tx *Tx) (err error) { sec, ok, err = tx.InventorySection("n1", section); return err }); err != nil {
		t.Fatalf("section %s does not read back: %v", section, err)
	}
	return sec, ok
}
