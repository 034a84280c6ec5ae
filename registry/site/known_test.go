package site

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// mac is the n-th MAC of tenant block b (0: acme, 1: beta).
func mac(b, n int) string {
	return fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", b, n>>16&0xff, n>>8&0xff, n&0xff)
}

// knownMACs is the site.knownMacs of rack-a's agent as stored, none before it is.
func knownMACs(t *testing.T, st *store.Store) []string {
	t.Helper()
	var spec proto.NodeSpec
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if spec, err = tx.NodeSpec(Agent("rack-a")); proto.CodeOf(err) == proto.NotFound {
			return nil // not written yet
		}
		return err
	})
	if spec.Site == nil {
		return nil
	}
	return spec.Site.KnownMACs
}

// TestKnownMACsFollowEnrolments: the running service writes into rack-a's NodeSpec the
// MACs of every machine enrolled at rack-a that is not retired, whatever its state and
// whether or not a boot entry names it, from the commit that enrolled it, bound its MAC
// or retired it, with no Kick and no Interval passing: a MAC discovery proposes is not
// known before it is bound, nor another site's machine.
func TestKnownMACsFollowEnrolments(t *testing.T) {
	st := openStore(t)
	storetest.Update(t, st, func(tx *store.Tx) error {
		if _, err := tx.CreateSite("rack-b"); err != nil {
			return err
		}
		_, err := tx.CreatePool(store.Pool{Tenant: "acme", Name: "far", Site: "rack-b"})
		return err
	})
	ready := storetest.Node(t, st, store.Node{MACs: []string{mac(0, 2), mac(0, 1)}, State: store.NodeReady})
	storetest.Node(t, st, store.Node{Tenant: "acme", Pool: "far", MACs: []string{mac(0, 9)}, State: store.NodeActive})
	fake := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	s := New(Config{Store: st, Clock: fake, Interval: time.Hour, Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitKnown := func(what string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for got := knownMACs(t, st); !slices.Equal(got, want); got = knownMACs(t, st) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: rack-a knows %v, want %v", what, got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitKnown("at start", mac(0, 1), mac(0, 2))

	active := storetest.Node(t, st, store.Node{MACs: []string{mac(0, 3)}, State: store.NodeActive})
	waitKnown("enrolled", mac(0, 1), mac(0, 2), mac(0, 3))

	byUUID := storetest.Node(t, st, store.Node{ProductUUID: "12345678-9abc-def0-1122-334455667788"})
	storetest.Update(t, st, func(tx *store.Tx) error {
		_, err := tx.ProposeMAC(byUUID.ID, store.MACProposal{MAC: mac(0, 0), Site: "rack-a"})
		return err
	})
	storetest.Update(t, st, func(tx *store.Tx) error {
		_, err := tx.UpdateNode(active.ID, func(n *store.Node) error { n.State = store.NodeRetiring; return nil })
		return err
	})
	// A proposal, or a state moving short of retired, changes nothing known; the next
	// write does, and the spec then holds no proposed MAC.
	storetest.Update(t, st, func(tx *store.Tx) error { _, err := tx.BindMAC(byUUID.ID, mac(0, 0), false); return err })
	waitKnown("bound", mac(0, 0), mac(0, 1), mac(0, 2), mac(0, 3))

	storetest.Update(t, st, func(tx *store.Tx) error {
		_, err := tx.UpdateNode(ready.ID, func(n *store.Node) error { n.State = store.NodeRetired; return nil })
		return err
	})
	waitKnown("retired", mac(0, 0), mac(0, 3))
}

// TestKnownMACsShare: beta enrolling more machines at rack-a than a site knows cannot
// push acme's out: over proto.MaxKnownMACs, beta, which has the most there, loses the
// MACs of its machines enrolled last, and the NodeSpec stays valid and within a frame.
func TestKnownMACsShare(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// beta's flood is past the nodes a tenant holds by default: its operator raised the bound.
	st := storetest.Filled(t, store.Options{Now: func() time.Time { at = at.Add(time.Second); return at }, Bounds: store.TenantBounds{Nodes: 2 * proto.MaxKnownMACs}})
	storetest.Update(t, st, func(tx *store.Tx) error {
		if _, err := tx.CreateTenant("beta"); err != nil {
			return err
		}
		_, err := tx.CreatePool(store.Pool{Tenant: "beta", Name: "flood", Site: "rack-a"})
		return err
	})
	var acme []string
	enrollAcme := func(from int) {
		for i := from; i < from+3; i++ {
			storetest.Node(t, st, store.Node{MACs: []string{mac(0, i)}, State: store.NodeActive})
			acme = append(acme, mac(0, i))
		}
	}
	enrollAcme(0)
	const flood, chunk = proto.MaxKnownMACs + 1000, 4096
	for from := 0; from < flood; from += chunk {
		storetest.Update(t, st, func(tx *store.Tx) error {
			for i := from; i < min(from+chunk, flood); i++ {
				if _, err := tx.CreateNode(store.Node{Tenant: "beta", Pool: "flood", MACs: []string{mac(1, i)}}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	enrollAcme(3)
	var spec proto.NodeSpec
	storetest.Update(t, st, func(tx *store.Tx) (err error) { spec, err = Refresh(tx, "rack-a", nil, ""); return err })
	known := spec.Site.KnownMACs
	if len(known) != proto.MaxKnownMACs {
		t.Fatalf("rack-a knows %d MACs, want %d", len(known), proto.MaxKnownMACs)
	}
	for _, m := range acme {
		if _, ok := slices.BinarySearch(known, m); !ok {
			t.Errorf("acme's %s was pushed out by beta's flood", m)
		}
	}
	// beta keeps the machines it enrolled first.
	kept := proto.MaxKnownMACs - len(acme)
	for _, i := range []int{0, kept - 1, kept, flood - 1} {
		if _, ok := slices.BinarySearch(known, mac(1, i)); ok != (i < kept) {
			t.Errorf("beta's machine %d known: %v, want %v", i, ok, i < kept)
		}
	}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	// With a cache plan at its bound (1 MiB) beside them, the spec still fits one etcd
	// request of the default size (1.5 MiB), and so a frame.
	var frame bytes.Buffer
	if err := proto.WriteMessage(&frame, &proto.Message{Type: proto.MsgSpec, Spec: &spec}); err != nil || frame.Len()+1<<20 > 3<<19 {
		t.Errorf("the NodeSpec takes %d bytes, beside a cache plan of 1 MiB more than etcd's default request of 1.5 MiB: %v", frame.Len(), err)
	}
}
