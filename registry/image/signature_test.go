package image

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

func TestDecodeSignature(t *testing.T) {
	sig64 := bytes.Repeat([]byte{0xfb}, 64)
	padded := base64.StdEncoding.EncodeToString(sig64)
	cases := map[string]struct {
		in   string
		want []byte
	}{
		"padded":          {in: padded, want: sig64},
		"unpadded":        {in: strings.TrimRight(padded, "="), want: sig64},
		"der length":      {in: base64.StdEncoding.EncodeToString(make([]byte, 71)), want: make([]byte, 71)},
		"url alphabet":    {in: base64.URLEncoding.EncodeToString(sig64)},
		"line break":      {in: padded[:20] + "\n" + padded[20:]},
		"carriage return": {in: padded[:20] + "\r" + padded[20:]},
		"space":           {in: padded[:20] + " " + padded[20:]},
		"extra padding":   {in: padded + "=="},
		"too short":       {in: base64.StdEncoding.EncodeToString(make([]byte, 7))},
		"too long":        {in: base64.StdEncoding.EncodeToString(make([]byte, 73))},
		"huge":            {in: strings.Repeat("A", 10000)},
		"empty":           {in: ""},
		"not base64":      {in: "!!!!"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeSignature(tc.in)
			if tc.want == nil {
				if e := proto.AsError(err); err == nil || e.Code != proto.InvalidInput || e.Details.Path != "signature" {
					t.Fatalf("got %x, %v; want INVALID_INPUT at signature", got, err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("got %x, %v", got, err)
			}
		})
	}
}

func FuzzDecodeSignature(f *testing.F) {
	for _, s := range []string{base64.StdEncoding.EncodeToString(make([]byte, 64)), "AAAA\nAAAA", "AA==", "=", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sig, err := DecodeSignature(s)
		if err != nil {
			if proto.CodeOf(err) != proto.InvalidInput {
				t.Fatalf("%q: %v is not INVALID_INPUT", s, err)
			}
			return
		}
		if len(sig) < minSignature || len(sig) > maxSignature {
			t.Fatalf("%q decoded to %d bytes", s, len(sig))
		}
		if again, err := DecodeSignature(encodeSignature(sig)); err != nil || !bytes.Equal(again, sig) {
			t.Fatalf("%q does not survive the catalog's encoding: %v", s, err)
		}
	})
}
