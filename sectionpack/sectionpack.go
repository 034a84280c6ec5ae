// Package sectionpack is the stored form of an agent's inventory section: its JSON as it
// is, or compressed with zstd when that makes it smaller. The registry's store writes each
// section in this form (registry/store's inventory records, and the entries of the site
// cache report it keeps of a site's `images` section), and a site agent cuts the
// sections it reports until their stored form fits (Fits), so that the two sides measure
// a section alike and the registry never refuses one for its size. It imports nothing of
// the project but proto. docs/store.md describes the record.
package sectionpack

import (
	"encoding/base64"
	"encoding/json"
	"sync"

	"github.com/better-compute/better-compute/proto"
	"github.com/klauspost/compress/zstd"
)

const (
	// From is the size of a section's JSON from which it is stored compressed (when that
	// is smaller): below it the record stays readable as it is.
	From = 4 << 10
	// RecordRoom is the room a record keeps for its fields beside the section's data: the
	// node id (at most 128 bytes), the section's name, when it was updated, the mark of a
	// refused report, their keys and the record's schema byte. At their longest they take
	// under 400 bytes; registry/store's TestASectionThatFitsIsStored holds them to it.
	RecordRoom = 1 << 10
	// MaxData bounds a section's stored form (Packed.Size): what proto.MaxInventoryRecord
	// leaves beside RecordRoom.
	MaxData = proto.MaxInventoryRecord - RecordRoom
	// maxDecoded bounds a section decompressed: what an agent frame holds.
	maxDecoded = proto.MaxFrame
)

// Packed is a section's data as stored: its JSON as it is (Data), or compressed with zstd
// (Zstd), one of the two. A record embeds it, so its fields are the record's.
type Packed struct {
	Data json.RawMessage `json:"data,omitempty"`
	// Zstd is written as base64 in the record's JSON.
	Zstd []byte `json:"zstd,omitempty"`
}

var (
	// The encoder runs at zstd's default level, one goroutine per call: a section is at
	// most an agent frame, packed once per change, and the registry packs the sections
	// of many agents at once.
	encoder = sync.OnceValue(func() *zstd.Encoder {
		e, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
		return e
	})
	decoder = sync.OnceValue(func() *zstd.Decoder {
		d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxDecoded))
		return d
	})
)

// Pack is data's stored form: compressed when data is From bytes or more and its
// compressed form, in base64, is smaller.
func Pack(data json.RawMessage) Packed {
	if len(data) >= From {
		if z := encoder().EncodeAll(data, nil); (len(z)+2)/3*4 < len(data) {
			return Packed{Zstd: z}
		}
	}
	return Packed{Data: data}
}

// Unpack is the section's JSON, decompressed when p is compressed; nil when p holds
// nothing. A compressed form that does not decode, or decodes to more than an agent frame,
// is an error.
func Unpack(p Packed) (json.RawMessage, error) {
	if p.Zstd == nil {
		return p.Data, nil
	}
	return decoder().DecodeAll(p.Zstd, nil)
}

// Size is the bytes p takes in its record: its fields' JSON, as the record writes them.
func (p Packed) Size() int {
	if p.Zstd != nil { // base64 with padding, as encoding/json writes bytes
		return len(`{"zstd":""}`) + base64.StdEncoding.EncodedLen(len(p.Zstd))
	}
	// Data as the record writes it: compacted, and <, > and & escaped.
	b, err := proto.Marshal(p)
	if err != nil { // Data is not JSON: the record would not be written at all
		return MaxData + 1
	}
	return len(b)
}

// Fits reports whether data's stored form is within MaxData, so that its record is within
// proto.MaxInventoryRecord whatever the record's other fields hold.
func Fits(data json.RawMessage) bool {
	return Pack(data).Size() <= MaxData
}
