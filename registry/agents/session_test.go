package agents

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/google/go-cmp/cmp"
)

// TestReplacementTurns: a node's session replaced while connected is counted first, and
// again when another of its sessions was replaced within twinWindow before (two agents
// taking turns); the registry warns of a node's turns at once, then at most once every
// twinWindow, and never of a session whose agent had closed it, nor of another node's
// single replacement. The nodes whose window passed are forgotten.
func TestReplacementTurns(t *testing.T) {
	var e Endpoint
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	steps := []struct {
		what  string
		node  string
		live  bool
		at    time.Duration
		warn  bool
		count Replacements
	}{
		{"an agent restarted while its old session lingers", "n1", true, 0, false, Replacements{First: 1}},
		{"a session its agent had closed", "n1", false, time.Second, false, Replacements{First: 1}},
		{"the old agent's turn", "n1", true, 30 * time.Second, true, Replacements{First: 1, Again: 1}},
		{"the new one's turn", "n1", true, time.Minute, false, Replacements{First: 1, Again: 2}},
		{"another node restarted", "n2", true, time.Minute, false, Replacements{First: 2, Again: 2}},
		{"n1 again after a quiet window", "n1", true, time.Minute + twinWindow + time.Second, false, Replacements{First: 3, Again: 2}},
		{"and a turn after it: warned again", "n1", true, time.Minute + twinWindow + 30*time.Second, true, Replacements{First: 3, Again: 3}},
		{"a turn within the window of that warning", "n1", true, 2*time.Minute + twinWindow, false, Replacements{First: 3, Again: 4}},
	}
	for _, st := range steps {
		if warn := e.replacing(identity{st.node, proto.RoleNode}, st.live, t0.Add(st.at)); warn != st.warn {
			t.Errorf("%s: warn %v, want %v", st.what, warn, st.warn)
		}
		if got := e.Replacements(); got != st.count {
			t.Errorf("%s: %+v, want %+v", st.what, got, st.count)
		}
	}

	// A fleet restarted at once while its old sessions linger, then one node later: the
	// map holds the nodes of the last window only.
	later := t0.Add(time.Hour)
	for i := range 1000 {
		e.replacing(identity{fmt.Sprintf("m%d", i), proto.RoleNode}, true, later)
	}
	for i := range 2 * minTurnsPrune {
		e.replacing(identity{fmt.Sprintf("k%d", i), proto.RoleNode}, true, later.Add(twinWindow+time.Second))
	}
	if len(e.turns) > 4*minTurnsPrune {
		t.Errorf("%d nodes remembered, want those replaced within the last window (%d) and few more", len(e.turns), 2*minTurnsPrune)
	}
}

// TestHelloRefusesARevokedIdentity: a node's identity revoked after serve checked it and
// before its session was registered (the revocation's commit found no session of it to
// end) is refused by the session's hello, before anything is recorded or sent, rather
// than left holding the node.
func TestHelloRefusesARevokedIdentity(t *testing.T) {
	st := storetest.Filled(t, store.Options{})
	node := storetest.Node(t, st, store.Node{MACs: []string{"52:54:00:00:00:01"}}).ID
	storetest.Update(t, st, func(tx *store.Tx) error {
		_, err := tx.UpdateNode(node, func(n *store.Node) error { n.IdentityRevokedAt = tx.Now(); return nil })
		return err
	})
	e := &Endpoint{cfg: Config{Store: st}}
	err := e.hello(newSession(node, proto.RoleNode), &proto.Hello{ObservedGeneration: 3})
	if proto.CodeOf(err) != proto.Forbidden {
		t.Fatalf("the hello of a node revoked since its first check: %v, want FORBIDDEN", err)
	}
	st.View(func(tx *store.Tx) error {
		if s, err := tx.AgentStatus(node); err == nil {
			t.Errorf("the refused hello was recorded: %+v", s)
		}
		return nil
	})
}

// TestHelloWritesNothingOnceTheEpochMoved: the node's identity epoch moves (a deploy,
// release or retire begins) after the hello's reads checked the agent's certificate and
// before its writes: the generation it reports and its inventory are not stored, and the
// hello is refused.
func TestHelloWritesNothingOnceTheEpochMoved(t *testing.T) {
	st := storetest.Filled(t, store.Options{})
	node := storetest.Node(t, st, store.Node{MACs: []string{"52:54:00:00:00:01"}}).ID
	moved := false
	e := &Endpoint{cfg: Config{Store: st, Elsewhere: func(*store.Tx, string, proto.Role) (string, error) {
		// Called within the hello's reads, after their check: the epoch moves in a commit
		// of its own, as another request's would.
		if !moved {
			moved = true
			done := make(chan error)
			go func() {
				done <- st.Update(func(tx *store.Tx) error {
					_, err := tx.UpdateNode(node, func(n *store.Node) error { n.IdentityEpoch++; return nil })
					return err
				})
			}()
			if err := <-done; err != nil {
				return "", err
			}
		}
		return "", nil
	}}}
	hello := &proto.Hello{ObservedGeneration: 3, Inventory: map[string]json.RawMessage{"host": json.RawMessage(`{"forged":true}`)}}
	err := e.hello(newSession(node, proto.RoleNode), hello)
	if !moved {
		t.Fatal("the hello did not read where the epoch was to move")
	}
	if proto.CodeOf(err) != proto.Forbidden || proto.AsError(err).Details.Reason != proto.ReasonEarlierInstallation {
		t.Errorf("the hello of a certificate whose epoch moved during it: %v, want FORBIDDEN, reason %s", err, proto.ReasonEarlierInstallation)
	}
	st.View(func(tx *store.Tx) error {
		if s, err := tx.AgentStatus(node); err == nil {
			t.Errorf("the earlier installation's generation was recorded: %+v", s)
		}
		if inv, err := tx.Inventory(node); err != nil || len(inv) > 0 {
			t.Errorf("the earlier installation's inventory was stored: %+v, %v", inv, err)
		}
		return nil
	})
}

// TestSplitSections: the changed sections of a hello are stored with its generation
// when small (the `site` section always), alone before it when large and counted as
// less cut than the stored `site` section counts them, alone after it otherwise.
func TestSplitSections(t *testing.T) {
	large := json.RawMessage(`"` + strings.Repeat("x", helloAlone) + `"`)
	siteSaying := func(omitted map[string]int) json.RawMessage {
		data, _ := json.Marshal(proto.SiteInventory{Omitted: omitted})
		return data
	}
	cutImages := proto.SiteInventory{Omitted: map[string]int{proto.SectionImages: 10}}
	for name, tc := range map[string]struct {
		changed              map[string]json.RawMessage
		stored               proto.SiteInventory
		before, small, after []string
	}{
		"small sections go with the generation": {
			changed: map[string]json.RawMessage{proto.SectionSite: siteSaying(nil), proto.SectionDiscoveries: json.RawMessage(`[]`)},
			small:   []string{proto.SectionDiscoveries, proto.SectionSite},
		},
		"a large section cut for the first time goes after": {
			changed: map[string]json.RawMessage{proto.SectionSite: siteSaying(cutImages.Omitted), proto.SectionImages: large},
			small:   []string{proto.SectionSite}, after: []string{proto.SectionImages},
		},
		"a large section whole again goes before": {
			changed: map[string]json.RawMessage{proto.SectionSite: siteSaying(nil), proto.SectionImages: large}, stored: cutImages,
			before: []string{proto.SectionImages}, small: []string{proto.SectionSite},
		},
		"a large section less cut goes before": {
			changed: map[string]json.RawMessage{proto.SectionSite: siteSaying(map[string]int{proto.SectionImages: 3}), proto.SectionImages: large}, stored: cutImages,
			before: []string{proto.SectionImages}, small: []string{proto.SectionSite},
		},
		"a large section cut further goes after": {
			changed: map[string]json.RawMessage{proto.SectionSite: siteSaying(map[string]int{proto.SectionImages: 11}), proto.SectionImages: large}, stored: cutImages,
			small: []string{proto.SectionSite}, after: []string{proto.SectionImages},
		},
		"a `site` section that does not decode says whole": {
			changed: map[string]json.RawMessage{proto.SectionSite: json.RawMessage(`{"omitted":"many"}`), proto.SectionImages: large}, stored: cutImages,
			before: []string{proto.SectionImages}, small: []string{proto.SectionSite},
		},
		"a `site` section unchanged keeps the stored one's count": {
			changed: map[string]json.RawMessage{proto.SectionImages: large}, stored: cutImages,
			after: []string{proto.SectionImages},
		},
		"the sections of each group in name order": {
			changed: map[string]json.RawMessage{proto.SectionSite: siteSaying(cutImages.Omitted), proto.SectionImages: large, proto.SectionDiscoveries: large, proto.SectionBootEntries: large},
			stored:  proto.SiteInventory{Omitted: map[string]int{proto.SectionDiscoveries: 1, proto.SectionBootEntries: 2}},
			before:  []string{proto.SectionBootEntries, proto.SectionDiscoveries}, small: []string{proto.SectionSite}, after: []string{proto.SectionImages},
		},
	} {
		t.Run(name, func(t *testing.T) {
			before, small, after := splitSections(slices.Collect(maps.Keys(tc.changed)), tc.changed, tc.stored)
			if diff := cmp.Diff([][]string{tc.before, tc.small, tc.after}, [][]string{before, small, after}); diff != "" {
				t.Errorf("before, small, after (-want +got):\n%s", diff)
			}
		})
	}
}
