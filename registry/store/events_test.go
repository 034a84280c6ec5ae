package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// eventsStore is a store whose clock the test moves.
func eventsStore(t *testing.T, open opener, now *time.Time) *Store {
	return openTest(t, open, Options{Now: func() time.Time { return *now }})
}

func appendEvents(t *testing.T, s *Store, node string, n int, workflow func(i int) string) {
	t.Helper()
	mustUpdate(t, s, func(tx *Tx) error {
		for i := range n {
			if _, err := tx.AppendEvent(Event{Node: node, Tenant: "acme", Kind: EventStepStarted, Workflow: workflow(i)}); err != nil {
				return err
			}
		}
		return nil
	})
}

func allEvents(t *testing.T, s *Store, node, workflow string, limit int) (pages [][]Event) {
	t.Helper()
	p := Page{Limit: limit}
	for {
		var evs []Event
		var next string
		err := s.View(func(tx *Tx) (err error) { evs, next, err = tx.Events(node, workflow, p); return err })
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, evs)
		if next == "" {
			return pages
		}
		p.Cursor = next
	}
}

func TestEventsPageInOrderPerNodeAndWorkflow(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		s := eventsStore(t, open, &now)
		appendEvents(t, s, "n1", 7, func(i int) string { return []string{"wf_a", "wf_b"}[i%2] })
		appendEvents(t, s, "n10", 3, func(int) string { return "wf_c" })

		pages := allEvents(t, s, "n1", "", 3)
		if len(pages) != 3 || len(pages[0]) != 3 || len(pages[2]) != 1 {
			t.Fatalf("n1's events in pages of 3: %v", pages)
		}
		var seq uint64
		for _, page := range pages {
			for _, e := range page {
				if e.Node != "n1" || e.Seq != seq+1 || !e.At.Equal(now) {
					t.Fatalf("event %+v after seq %d: want n1's next, stamped %v", e, seq, now)
				}
				seq = e.Seq
			}
		}
		wfB := allEvents(t, s, "n1", "wf_b", 2)
		if got := len(wfB[0]) + len(wfB[1]); got != 3 || wfB[0][0].Seq != 2 || wfB[1][0].Seq != 6 {
			t.Fatalf("wf_b's events: %v, want seqs 2, 4, 6", wfB)
		}
		// A cursor made for one node does not list another's.
		err := s.View(func(tx *Tx) error {
			_, _, err := tx.Events("n10", "", Page{Cursor: EventCursor("n1", 2)})
			return err
		})
		if proto.CodeOf(err) != proto.InvalidInput {
			t.Fatalf("n1's cursor on n10: %v, want INVALID_INPUT", err)
		}
		var after []Event
		mustUpdate(t, s, func(tx *Tx) (err error) {
			after, _, err = tx.Events("n1", "", Page{Cursor: EventCursor("n1", 5)})
			return err
		})
		if len(after) != 2 || after[0].Seq != 6 {
			t.Fatalf("after seq 5: %v", after)
		}
	})
}

func TestEventsKeepTheLastPerNodeAndPruneByAge(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		s := eventsStore(t, open, &now)
		appendEvents(t, s, "n1", EventsPerNode+5, func(int) string { return "" })
		pages := allEvents(t, s, "n1", "", 0)
		var got []Event
		for _, p := range pages {
			got = append(got, p...)
		}
		if len(got) != EventsPerNode || got[0].Seq != 6 || got[len(got)-1].Seq != EventsPerNode+5 {
			t.Fatalf("kept %d events, seqs %d..%d: want the last %d", len(got), got[0].Seq, got[len(got)-1].Seq, EventsPerNode)
		}

		now = now.Add(EventMaxAge)
		appendEvents(t, s, "n1", 2, func(int) string { return "" })
		appendEvents(t, s, "n2", 1, func(int) string { return "" })
		now = now.Add(time.Second)
		dropped, err := s.PruneOnward((*Tx).PruneEvents)
		if err != nil || dropped != EventsPerNode-2 { // the two new ones pushed two old ones out
			t.Fatalf("pruned %d, want the %d older than %v", dropped, EventsPerNode-2, EventMaxAge)
		}
		left := allEvents(t, s, "n1", "", 0)[0]
		if len(left) != 2 || left[0].Seq != EventsPerNode+6 {
			t.Fatalf("left %v, want the two recent ones, their seqs going on", left)
		}
		appendEvents(t, s, "n1", 1, func(int) string { return "" })
		if last := allEvents(t, s, "n1", "", 0)[0]; last[len(last)-1].Seq != EventsPerNode+8 {
			t.Fatalf("a seq was reused after pruning: %v", last)
		}
	})
}

// TestPruneEventsInBoundedTransactions: a backlog of old events is pruned at most
// eventPruneReads a transaction, oldest first, and Store.PruneOnward runs transactions,
// each going on from where the one before stopped, until it reached the last node; the
// recent events stay.
func TestPruneEventsInBoundedTransactions(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		s := eventsStore(t, open, &now)
		nodes := []string{"n1", "n2", "n3"}
		for _, n := range nodes {
			appendEvents(t, s, n, 600, func(int) string { return "" })
		}
		now = now.Add(EventMaxAge + time.Second)
		appendEvents(t, s, "n2", 1, func(int) string { return "" })
		var first int
		mustUpdate(t, s, func(tx *Tx) (err error) { first, _, err = tx.PruneEvents(nil); return err })
		if first != eventPruneReads {
			t.Fatalf("one transaction pruned %d, want %d", first, eventPruneReads)
		}
		rest, err := s.PruneOnward((*Tx).PruneEvents)
		if err != nil || first+rest != 3*600 {
			t.Fatalf("Prune: %d then %d (%v), want %d in all", first, rest, err, 3*600)
		}
		for _, n := range nodes {
			want := 0
			if n == "n2" {
				want = 1
			}
			if left := allEvents(t, s, n, "", 0)[0]; len(left) != want {
				t.Errorf("%s keeps %d events, want %d", n, len(left), want)
			}
		}
	})
}

// TestEtcdEventPruneConflictsOnlyWithTheNodesItRead: on etcd, the first transaction of
// the daily event prune, over 150 nodes with an old event each, reads the heads of the
// first 100 nodes and their events, and stops; another replica appending an event
// before it commits runs it again only when the event is of a node whose head it read. An
// event of a node past where it stopped, one of a node at its bound of events (whose
// append deletes its oldest) included, leaves it to commit at once. Before, it read the
// heads of every node and the oldest event of each by its key, past etcd's 128 compares,
// so that each bucket read stood for all of it: any event written anywhere ran it again,
// and a mass deploy's events could use up its 50 tries.
func TestEtcdEventPruneConflictsOnlyWithTheNodesItRead(t *testing.T) {
	for name, c := range map[string]struct {
		node string
		runs int
		// old is how many events are older than the cutoff: the one written to z, at its
		// bound, drops one.
		old int
	}{
		"a node it read":                      {node: "n050", runs: 2, old: 150 + EventsPerNode},
		"a node past where it stopped":        {node: "n149", runs: 1, old: 150 + EventsPerNode},
		"a node at its bound, past its range": {node: "z", runs: 1, old: 150 + EventsPerNode - 1},
	} {
		t.Run(name, func(t *testing.T) {
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			cfg := EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}
			var stores []*Store
			for range 2 {
				s, err := OpenEtcd(cfg, Options{Now: func() time.Time { return now }})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				stores = append(stores, s)
			}
			prune, writer := stores[0], stores[1]
			mustUpdate(t, prune, func(tx *Tx) error {
				for i := range 150 {
					if _, err := tx.AppendEvent(Event{Node: fmt.Sprintf("n%03d", i), Tenant: "acme", Kind: EventNodeState, To: NodeReady}); err != nil {
						return err
					}
				}
				return nil
			})
			for range EventsPerNode / 500 {
				appendEvents(t, prune, "z", 500, func(int) string { return "" })
			}
			now = now.Add(EventMaxAge + time.Hour)
			var pruned int
			scan := func(tx *Tx) (err error) { pruned, _, err = tx.PruneEvents(nil); return err }
			write := func(tx *Tx) error {
				_, err := tx.AppendEvent(Event{Node: c.node, Tenant: "acme", Kind: EventNodeState, To: NodeActive})
				return err
			}
			if got := runsAround(t, prune, writer, scan, write); got != c.runs {
				t.Errorf("the prune ran %d times, want %d", got, c.runs)
			}
			rest, err := prune.PruneOnward((*Tx).PruneEvents)
			if err != nil || pruned+rest != c.old {
				t.Errorf("the prune pruned %d, then %d (%v); want %d in all: every event but the one just written", pruned, rest, err, c.old)
			}
		})
	}
}
