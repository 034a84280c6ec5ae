package store

import (
	"bytes"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/sectionpack"
)

// sectionOf is a JSON array of n entries of about size bytes each, whose text is drawn
// from alphabet (two letters: it compresses eightfold; many: as good as random).
func sectionOf(r *rand.Rand, n, size int, alphabet string) json.RawMessage {
	entries := make([]string, n)
	for i := range entries {
		b := make([]byte, size)
		for j := range b {
			b[j] = alphabet[r.IntN(len(alphabet))]
		}
		entries[i] = fmt.Sprintf(`{"i":%d,"s":%q}`, i, b)
	}
	return json.RawMessage("[" + strings.Join(entries, ",") + "]")
}

const randomLetters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func inventoryOf(t *testing.T, s *Store, node string) map[string]InventorySection {
	t.Helper()
	out := map[string]InventorySection{}
	err := s.View(func(tx *Tx) error {
		inv, err := tx.Inventory(node)
		for _, sec := range inv {
			out[sec.Section] = sec
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInventoryStoredCompressed: a section larger than one transaction of etcd's
// default takes, and than proto.MaxInventoryRecord, is stored when it compresses within it, and
// reads back as sent; a small one is stored as JSON, readable as it is. The same on both
// backends.
func TestInventoryStoredCompressed(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		r := rand.New(rand.NewPCG(1, 1))
		big := sectionOf(r, 1500, 1024, "0123456789abcdef"[:2]) // 1.5 MiB
		small := json.RawMessage(`{"httpBase":"http://10.0.0.1"}`)
		err := s.Update(func(tx *Tx) error {
			if _, err := tx.PutInventory("n1", "images", big); err != nil {
				return err
			}
			_, err := tx.PutInventory("n1", "site", small)
			return err
		})
		if err != nil {
			t.Fatalf("a 1.5 MiB section that compresses: %v", err)
		}
		inv := inventoryOf(t, s, "n1")
		if !bytes.Equal(inv["images"].Data, big) || !bytes.Equal(inv["site"].Data, small) {
			t.Fatal("the sections do not read back as sent")
		}
		s.View(func(tx *Tx) error {
			raw := tx.kv.get(bucketInventory, inventoryKey("n1", "images"))
			if len(raw) >= proto.MaxInventoryRecord || bytes.Contains(raw, big[:100]) {
				t.Errorf("the large section is stored in %d bytes, as its JSON: want it compressed", len(raw))
			}
			if raw := tx.kv.get(bucketInventory, inventoryKey("n1", "site")); !bytes.Contains(raw, small) {
				t.Errorf("the small section is stored as %s: want its JSON", raw)
			}
			return nil
		})
		// The same again is no change.
		var changed bool
		s.Update(func(tx *Tx) (err error) { changed, err = tx.PutInventory("n1", "images", big); return err })
		if changed {
			t.Error("the same compressed section again counted as a change")
		}
	})
}

// TestInventoryTooLargeIsRefused: a section that does not fit proto.MaxInventoryRecord even
// compressed is INVALID_INPUT at inventory.<section> on both backends and changes
// nothing; RefuseInventory marks the copy stored before (or, with none, a null one) and
// the next report stored clears the mark, the copy before reported again included.
func TestInventoryTooLargeIsRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		r := rand.New(rand.NewPCG(2, 2))
		before := json.RawMessage(`[{"i":0}]`)
		if err := s.Update(func(tx *Tx) error { _, err := tx.PutInventory("n1", "images", before); return err }); err != nil {
			t.Fatal(err)
		}
		huge := sectionOf(r, 1400, 1024, randomLetters) // 1.4 MiB, as good as random
		err := s.Update(func(tx *Tx) error { _, err := tx.PutInventory("n1", "images", huge); return err })
		if proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "inventory.images" {
			t.Fatalf("a section too large even compressed: %v, want INVALID_INPUT at inventory.images", err)
		}
		err = s.Update(func(tx *Tx) error { _, err := tx.PutInventory("n1", "discoveries", huge); return err })
		if proto.CodeOf(err) != proto.InvalidInput {
			t.Fatalf("a new section too large: %v", err)
		}
		for _, section := range []string{"images", "discoveries"} {
			if err := s.Update(func(tx *Tx) error { return tx.RefuseInventory("n1", section, len(huge)) }); err != nil {
				t.Fatal(err)
			}
		}
		inv := inventoryOf(t, s, "n1")
		if got := inv["images"]; !bytes.Equal(got.Data, before) || got.Refused == nil || got.Refused.Bytes != len(huge) || got.Refused.At.IsZero() {
			t.Fatalf("images after its refusal: %s, %+v; want the copy before, marked", got.Data, got.Refused)
		}
		if got := inv["discoveries"]; string(got.Data) != "null" || got.Refused == nil {
			t.Fatalf("a section refused with none before: %s, %+v; want null, marked", got.Data, got.Refused)
		}

		var changed bool
		s.Update(func(tx *Tx) (err error) { changed, err = tx.PutInventory("n1", "images", before); return err })
		if got := inventoryOf(t, s, "n1")["images"]; changed || got.Refused != nil {
			t.Errorf("the copy before reported again: changed %v, refused %+v; want unchanged, the mark gone", changed, got.Refused)
		}
		s.Update(func(tx *Tx) (err error) {
			changed, err = tx.PutInventory("n1", "discoveries", json.RawMessage(`[]`))
			return err
		})
		if got := inventoryOf(t, s, "n1")["discoveries"]; !changed || got.Refused != nil || string(got.Data) != "[]" {
			t.Errorf("a report that fits: changed %v, %s, refused %+v", changed, got.Data, got.Refused)
		}
	})
}

// TestASectionThatFitsIsStored: a section whose stored form takes exactly
// sectionpack.MaxData, what a site agent cuts its sections to, is stored on both
// backends, for the longest node id and section name, at a time whose JSON is the
// longest, and with the longest mark of a refusal beside it: the record's other fields
// take no more than sectionpack.RecordRoom.
func TestASectionThatFitsIsStored(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open, Options{Now: func() time.Time { return longestNow }})
		// Base64 of random bytes, six bits a character, does not compress by the quarter
		// its stored form in base64 would need, so it is stored as it is.
		raw := make([]byte, sectionpack.MaxData)
		crand.Read(raw)
		text := base64.RawURLEncoding.EncodeToString(raw)
		data := json.RawMessage(`["` + text[:sectionpack.MaxData-len(`{"data":[""]}`)] + `"]`)
		if p := sectionpack.Pack(data); p.Zstd != nil || p.Size() != sectionpack.MaxData || !sectionpack.Fits(data) {
			t.Fatalf("the section's stored form: %d bytes (compressed %v), want %d as JSON", p.Size(), p.Zstd != nil, sectionpack.MaxData)
		}
		node, section := "n"+strings.Repeat("0", 127), longestSection
		if err := s.Update(func(tx *Tx) error { _, err := tx.PutInventory(node, section, data); return err }); err != nil {
			t.Fatalf("a section of sectionpack.MaxData stored: %v", err)
		}
		if err := s.Update(func(tx *Tx) error { return tx.RefuseInventory(node, section, math.MinInt) }); err != nil {
			t.Fatalf("the same section marked refused: %v", err)
		}
		got := inventoryOf(t, s, node)[section]
		if !bytes.Equal(got.Data, data) || got.Refused == nil {
			t.Fatalf("the section read back: %d bytes, refused %+v; want it as sent, marked", len(got.Data), got.Refused)
		}
		s.View(func(tx *Tx) error {
			record := len(tx.kv.get(bucketInventory, inventoryKey(node, section)))
			t.Logf("the record's other fields take %d bytes", record-sectionpack.MaxData)
			if record > proto.MaxInventoryRecord || record-sectionpack.MaxData > sectionpack.RecordRoom {
				t.Errorf("the record takes %d bytes, %d beside its data: want at most %d, %d", record, record-sectionpack.MaxData, proto.MaxInventoryRecord, sectionpack.RecordRoom)
			}
			return nil
		})
	})
}

// longestNow is a time whose JSON is as long as a record's can be: nine digits of a
// second and an offset of its own (-23:59), not Z.
var longestNow = time.Date(2026, 12, 1, 12, 0, 0, 123456789, time.FixedZone("", -(23*60+59)*60))

// longestSection is the longest section name an agent may send (proto.CheckSectionName).
var longestSection = "s" + strings.Repeat("0", 63)

// sectionWithRecord is a section whose record, without a mark, takes n bytes as the
// store writes it for node and section at now: base64 of random bytes, which does not
// compress by the quarter its stored form would need, so it is stored as it is.
func sectionWithRecord(node, section string, now time.Time, n int) json.RawMessage {
	raw := make([]byte, n)
	crand.Read(raw)
	text := base64.RawURLEncoding.EncodeToString(raw)
	data := func(k int) json.RawMessage { return json.RawMessage(`["` + text[:k] + `"]`) }
	empty, _ := json.Marshal(InventorySection{Node: node, Section: section, Data: data(0), UpdatedAt: now}.record())
	return data(n - 1 - len(empty))
}

// TestTheMarkOfARefusalAlwaysFits: sections whose records come to the store's bound
// (proto.MaxInventoryRecord) and just under it, for the longest node id and section
// name, at a time whose JSON is the longest. Each copy the store takes can be marked
// refused afterwards with the longest count, on both backends; one it does not take is
// INVALID_INPUT at inventory.<section> and stores nothing; one 128 bytes under the
// bound is taken. Before, a record exactly at the bound was stored and its mark then
// pushed it over and was refused: the copy stayed unmarked, shown to an operator as
// the agent's latest report.
func TestTheMarkOfARefusalAlwaysFits(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open, Options{Now: func() time.Time { return longestNow }})
		node := "n" + strings.Repeat("0", 127)
		for _, under := range []int{0, 1, 64, 128} {
			section := longestSection[:len(longestSection)-3] + fmt.Sprintf("%03d", under)
			data := sectionWithRecord(node, section, longestNow, proto.MaxInventoryRecord-under)
			err := s.Update(func(tx *Tx) error { _, err := tx.PutInventory(node, section, data); return err })
			_, stored := inventoryOf(t, s, node)[section]
			switch {
			case err != nil && (proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "inventory."+section || stored):
				t.Errorf("a record %d bytes under the bound: %v, stored %v; want it stored, or INVALID_INPUT at inventory.%s and nothing stored", under, err, stored, section)
			case err != nil && under == 128:
				t.Errorf("a record 128 bytes under the bound: %v; want it stored", err)
			case err == nil:
				if err := s.Update(func(tx *Tx) error { return tx.RefuseInventory(node, section, math.MaxInt) }); err != nil {
					t.Errorf("the copy stored of a record %d bytes under the bound, marked refused: %v", under, err)
					continue
				}
				if got := inventoryOf(t, s, node)[section]; !bytes.Equal(got.Data, data) || got.Refused == nil || got.Refused.Bytes != math.MaxInt {
					t.Errorf("the copy of a record %d bytes under the bound, marked: %d bytes, refused %+v; want it as stored, marked", under, len(got.Data), got.Refused)
				}
			}
		}
	})
}

// TestInventoryRecordOfEarlierVersions: a record a registry of an earlier version wrote
// (its data as JSON, no compression, no mark) reads as it did.
func TestInventoryRecordOfEarlierVersions(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		data := json.RawMessage(`[{"mac":"52:54:00:00:00:01"}]`)
		err := s.Update(func(tx *Tx) error {
			return tx.put(bucketInventory, inventoryKey("n1", "nics"), struct {
				Node    string          `json:"node"`
				Section string          `json:"section"`
				Data    json.RawMessage `json:"data"`
			}{"n1", "nics", data})
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := inventoryOf(t, s, "n1")["nics"]; !bytes.Equal(got.Data, data) || got.Refused != nil {
			t.Fatalf("an earlier version's record: %s, %+v", got.Data, got.Refused)
		}
	})
}

// earlierRecord is a record of the shape an earlier release wrote (its data as JSON, no
// compression, no mark), as that release stored it without keeping room for a mark.
type earlierRecord struct {
	Node    string          `json:"node"`
	Section string          `json:"section"`
	Data    json.RawMessage `json:"data"`
}

// listWithRecord is a list of base64 strings of random bytes (which do not compress by
// the quarter their stored form would need) whose earlierRecord for node and section
// takes n bytes as stored, and its entries.
func listWithRecord(t *testing.T, node, section string, n int) (json.RawMessage, []string) {
	t.Helper()
	empty, err := proto.Marshal(earlierRecord{node, section, json.RawMessage(`[]`)})
	if err != nil {
		t.Fatal(err)
	}
	// room is what the entries take: each its text, its quotes and a comma before it
	// but the first. Entries of 4 KiB, then one taking the rest.
	room := n - 1 - len(empty)
	var entries []string
	entry := func(size int) {
		raw := make([]byte, size)
		crand.Read(raw)
		entries = append(entries, `"`+base64.RawURLEncoding.EncodeToString(raw)[:size]+`"`)
		room -= size + len(`""`) + min(len(entries)-1, 1)
	}
	for room >= 2*(4096+len(`"",`)) {
		entry(4096)
	}
	entry(room - len(`""`) - min(len(entries), 1))
	return json.RawMessage("[" + strings.Join(entries, ",") + "]"), entries
}

// TestAnEarlierRecordAtTheBoundTakesItsMark: records an earlier release stored in the
// shape of its time, at proto.MaxInventoryRecord and within the mark's room of it
// (markRoom), which that release did not keep, take the mark of a refused report on
// both backends: a list as good as random keeps its first entries that fit beside the
// mark, which counts the ones left out (refused.leftOut); a section that is not a list
// is left out whole (data null, leftOut 1); one that compresses is stored compressed,
// whole. Each record then takes at most the bound, and the next report stored clears
// the mark. Before, the mark was refused as INVALID_INPUT and the copy stayed
// unmarked, shown to an operator as the agent's latest report.
func TestAnEarlierRecordAtTheBoundTakesItsMark(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open, Options{Now: func() time.Time { return longestNow }})
		node := "n" + strings.Repeat("0", 127)
		object := func(n int) json.RawMessage {
			empty, _ := proto.Marshal(earlierRecord{node, "object", json.RawMessage(`{"pad":""}`)})
			raw := make([]byte, n)
			crand.Read(raw)
			return json.RawMessage(`{"pad":"` + base64.RawURLEncoding.EncodeToString(raw)[:n-1-len(empty)] + `"}`)
		}
		compressible := func(n int) json.RawMessage {
			empty, _ := proto.Marshal(earlierRecord{node, "compressible", json.RawMessage(`{"pad":""}`)})
			return json.RawMessage(`{"pad":"` + strings.Repeat("ab", n)[:n-1-len(empty)] + `"}`)
		}
		for _, under := range []int{0, 1, markRoom - 1} {
			list, entries := listWithRecord(t, node, "list", proto.MaxInventoryRecord-under)
			sections := map[string]json.RawMessage{"list": list, "object": object(proto.MaxInventoryRecord - under), "compressible": compressible(proto.MaxInventoryRecord - under)}
			for section, data := range sections {
				mustUpdate(t, s, func(tx *Tx) error {
					return tx.put(bucketInventory, inventoryKey(node, section), earlierRecord{node, section, data})
				})
				s.View(func(tx *Tx) error {
					if size := len(tx.kv.get(bucketInventory, inventoryKey(node, section))); size != proto.MaxInventoryRecord-under {
						t.Fatalf("the earlier %s record takes %d bytes, want %d", section, size, proto.MaxInventoryRecord-under)
					}
					return nil
				})
				if err := s.Update(func(tx *Tx) error { return tx.RefuseInventory(node, section, math.MaxInt) }); err != nil {
					t.Fatalf("marking an earlier %s record %d bytes under the bound: %v", section, under, err)
				}
				s.View(func(tx *Tx) error {
					if size := len(tx.kv.get(bucketInventory, inventoryKey(node, section))); size > proto.MaxInventoryRecord {
						t.Errorf("the earlier %s record %d bytes under the bound, marked, takes %d bytes", section, under, size)
					}
					return nil
				})
			}
			inv := inventoryOf(t, s, node)
			got := inv["list"]
			var kept []string
			if err := json.Unmarshal(got.Data, &kept); err != nil {
				t.Fatal(err)
			}
			if got.Refused == nil || got.Refused.Bytes != math.MaxInt || got.Refused.LeftOut == 0 || len(kept)+got.Refused.LeftOut != len(entries) {
				t.Errorf("%d under: the list marked: %d entries kept of %d, refused %+v; want its first entries, the others counted", under, len(kept), len(entries), got.Refused)
			}
			for i, e := range kept {
				if `"`+e+`"` != entries[i] {
					t.Errorf("%d under: the list's entry %d is not the copy's", under, i)
					break
				}
			}
			if got := inv["object"]; got.Refused == nil || got.Refused.LeftOut != 1 || string(got.Data) != "null" {
				t.Errorf("%d under: the object marked: %.40s, refused %+v; want null, leftOut 1", under, got.Data, got.Refused)
			}
			if got := inv["compressible"]; got.Refused == nil || got.Refused.LeftOut != 0 || !bytes.Equal(got.Data, sections["compressible"]) {
				t.Errorf("%d under: the compressible section marked: %d bytes, refused %+v; want it whole, marked", under, len(got.Data), got.Refused)
			}
			mustUpdate(t, s, func(tx *Tx) error { _, err := tx.PutInventory(node, "list", json.RawMessage(`[]`)); return err })
			if got := inventoryOf(t, s, node)["list"]; got.Refused != nil || string(got.Data) != "[]" {
				t.Errorf("%d under: the next report: %s, refused %+v; want it stored, the mark gone", under, got.Data, got.Refused)
			}
		}
	})
}
