package sectionpack

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestPackKeepsWhatCompressesNot: a small section and one whose compressed form in base64
// would be larger stay JSON; one that compresses is stored compressed; each unpacks to
// what was packed, and its size is what its fields' JSON takes.
func TestPackKeepsWhatCompressesNot(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	random := make([]byte, 8<<10)
	for i := range random { // six bits a letter: compressed, in base64, no smaller
		random[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[r.IntN(64)]
	}
	for name, tc := range map[string]struct {
		data       json.RawMessage
		compressed bool
	}{
		"small":             {json.RawMessage(`{"httpBase":"http://10.0.0.1"}`), false},
		"repetitive":        {json.RawMessage(`["` + strings.Repeat("ab", 4<<10) + `"]`), true},
		"below From":        {json.RawMessage(`["` + strings.Repeat("a", From-5) + `"]`), false},
		"as good as random": {json.RawMessage(`["` + string(random) + `"]`), false},
	} {
		t.Run(name, func(t *testing.T) {
			p := Pack(tc.data)
			if (p.Zstd != nil) != tc.compressed || (p.Zstd != nil) == (p.Data != nil) {
				t.Fatalf("packed compressed %v, as JSON %v: want compressed %v", p.Zstd != nil, p.Data != nil, tc.compressed)
			}
			got, err := Unpack(p)
			if err != nil || !bytes.Equal(got, tc.data) {
				t.Fatalf("unpacked %.40s, %v: want what was packed", got, err)
			}
			b, _ := json.Marshal(p)
			if p.Size() != len(b) || Fits(tc.data) != (len(b) <= MaxData) {
				t.Fatalf("size %d, fits %v: its JSON takes %d", p.Size(), Fits(tc.data), len(b))
			}
		})
	}
}

// TestUnpackRefusesWhatIsNotZstd: a stored compressed form that is not zstd is an error,
// not a section.
func TestUnpackRefusesWhatIsNotZstd(t *testing.T) {
	if data, err := Unpack(Packed{Zstd: []byte("not zstd")}); err == nil {
		t.Fatalf("unpacked %q from bytes that are not zstd", data)
	}
}

// FuzzPack: whatever JSON an agent sends, its stored form unpacks to it, and Fits says
// whether that form is within MaxData. Unpack reads records a store holds, so it must
// refuse, not fail, on any bytes.
func FuzzPack(f *testing.F) {
	f.Add([]byte(`[{"digest":"00","state":"ready"}]`), []byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Add([]byte(`["`+strings.Repeat("x", From)+`"]`), []byte{})
	f.Fuzz(func(t *testing.T, data, z []byte) {
		if json.Valid(data) {
			p := Pack(data)
			got, err := Unpack(p)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%q packed and unpacked: %q, %v", data, got, err)
			}
			if Fits(data) != (p.Size() <= MaxData) {
				t.Fatal("Fits disagrees with the stored form's size")
			}
		}
		Unpack(Packed{Zstd: z})
	})
}
