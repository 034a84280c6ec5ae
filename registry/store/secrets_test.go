package store

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestSecretsOnePerNodeAndPurpose(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		put := func(sec Secret) error { return s.Update(func(tx *Tx) error { return tx.PutSecret(sec) }) }
		get := func(ref string) (sec Secret, ok bool) {
			t.Helper()
			if err := s.View(func(tx *Tx) (err error) { sec, ok, err = tx.Secret(ref); return err }); err != nil {
				t.Fatal(err)
			}
			return sec, ok
		}
		for _, sec := range []Secret{
			{Ref: "a1", Purpose: "userdata", NodeID: "n1", Sealed: []byte{1}},
			{Ref: "b1", Purpose: "userdata", NodeID: "n2", Sealed: []byte{2}},
			{Ref: "c1", Purpose: "bmc", NodeID: "n1", Sealed: []byte{3}},
			{Ref: "a2", Purpose: "userdata", NodeID: "n1", Sealed: []byte{4}},
		} {
			if err := put(sec); err != nil {
				t.Fatalf("put %s: %v", sec.Ref, err)
			}
		}
		present := map[string]bool{}
		for _, ref := range []string{"a1", "a2", "b1", "c1"} {
			_, present[ref] = get(ref)
		}
		if diff := cmp.Diff(map[string]bool{"a1": false, "a2": true, "b1": true, "c1": true}, present); diff != "" {
			t.Errorf("secrets present after a2 replaced a1 (-want +got):\n%s", diff)
		}
		if got, _ := get("a2"); got.NodeID != "n1" || got.Purpose != "userdata" || string(got.Sealed) != "\x04" || got.CreatedAt.IsZero() {
			t.Errorf("a2 = %+v", got)
		}
		for name, tc := range map[string]struct {
			sec  Secret
			code proto.Code
		}{
			"existing ref": {Secret{Ref: "b1", Purpose: "userdata", NodeID: "n3"}, proto.Conflict},
			"no ref":       {Secret{Purpose: "userdata", NodeID: "n3"}, proto.Internal},
			"no node":      {Secret{Ref: "x", Purpose: "userdata"}, proto.Internal},
		} {
			t.Run(name, func(t *testing.T) {
				if err := put(tc.sec); proto.CodeOf(err) != tc.code {
					t.Fatalf("err = %v, want %s", err, tc.code)
				}
			})
		}
	})
}
