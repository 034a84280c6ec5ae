package store

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// TestOneTPMOneNodeInTheStore: an EK enrolled for one node is refused to another
// (INVALID_STATE ek-enrolled) in the transaction that would store it, on either backend;
// the node's own record is stored again; and a store whose TPMs were enrolled before the
// index existed gets their entries when it is opened again, so the refusal holds for
// them too, and Check finds nothing.
func TestOneTPMOneNodeInTheStore(t *testing.T) {
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) {
			open := b.place(t)
			st, err := open(t, Options{})
			if err != nil {
				t.Fatal(err)
			}
			a, c := "nd_00000000000000a1", "nd_00000000000000c1"
			ekA, ekB := []byte("the EK of machine A"), []byte("the EK of machine B")
			put := func(st *Store, rec NodeTPM) error {
				return st.Update(func(tx *Tx) error { return tx.PutNodeTPM(rec) })
			}
			if err := put(st, NodeTPM{Node: a, EKPublic: ekA}); err != nil {
				t.Fatal(err)
			}
			if err := put(st, NodeTPM{Node: a, EKPublic: ekA, AKBlob: []byte("a boot later")}); err != nil {
				t.Fatalf("the node's own record again: %v", err)
			}
			if err := put(st, NodeTPM{Node: c, EKPublic: ekA}); proto.CodeOf(err) != proto.InvalidState || proto.AsError(err).Details.Reason != proto.ReasonEKEnrolled {
				t.Fatalf("A's EK for node c: %v; want INVALID_STATE ek-enrolled", err)
			}
			// A's record as a registry wrote it before the index: no entry.
			if err := st.Update(func(tx *Tx) error { return tx.del(bucketNodeTPMByEK, ekKey(ekA)) }); err != nil {
				t.Fatal(err)
			}
			if err := put(st, NodeTPM{Node: "nd_00000000000000b1", EKPublic: ekB}); err != nil {
				t.Fatal(err)
			}
			st.Close()
			if st, err = open(t, Options{}); err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := put(st, NodeTPM{Node: c, EKPublic: ekA}); proto.CodeOf(err) != proto.InvalidState {
				t.Errorf("A's EK for node c after the store was opened again: %v; want INVALID_STATE", err)
			}
			if err := st.Check(); err != nil {
				t.Errorf("Check: %v", err)
			}
		})
	}
}
