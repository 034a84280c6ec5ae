package store

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestAgentJoinBootID: each join of a machine's agent keeps the boot id its hello told;
// the next join of the role replaces it (a
// reconnect of another boot, a join the JoinService admitted that tells none), the end
// of its session keeps it, and the other role's join is its own.
func TestAgentJoinBootID(t *testing.T) {
	const before, after = "0b1e7a52-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "9f8e7d6c-5b4a-4321-8fed-cba987654321"
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		at := Holder{Replica: "rg_a", Started: time.Now()}
		boots := func() map[string]string {
			t.Helper()
			out := map[string]string{}
			if err := s.View(func(tx *Tx) error {
				joins, err := tx.AgentJoins("nd_1")
				for role, j := range joins {
					out[role] = j.BootID
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return out
		}
		check := func(step string, want map[string]string) {
			t.Helper()
			if diff := cmp.Diff(want, boots()); diff != "" {
				t.Errorf("%s (-want +got):\n%s", step, diff)
			}
		}
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.RecordAgentJoin("nd_1", "node", at, time.Time{}, before); return err })
		mustUpdate(t, s, func(tx *Tx) error { return tx.RecordAgentLeft("nd_1", "node", at, time.Now()) })
		check("a session of the node that ended", map[string]string{"node": before})
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.RecordAgentJoin("nd_1", "ramdisk", Holder{}, time.Time{}, "")
			return err
		})
		check("a ramdisk admitted", map[string]string{"node": before, "ramdisk": ""})
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.RecordAgentJoin("nd_1", "ramdisk", at, time.Time{}, after)
			return err
		})
		check("the ramdisk's session", map[string]string{"node": before, "ramdisk": after})
	})
}

// TestAnOlderSessionRecordsNothingOverANewerOne: an agent's session opens at replica
// rg_a, and the write of its hello pauses; the agent, gone from it, opens a newer session
// at rg_b, which is recorded; then rg_a's write commits. For a machine's agent (its join)
// and a site agent (its session) alike, the record stays the newer session's (rg_b's,
// its boot), no OnSessionOpened hook hears of the older one, and the older session's end
// closes nothing. Before, the older session's record replaced the newer one's: the
// hooks told rg_b its session was replaced by rg_a's (rg_b ended the agent's live
// session), the join told the boot of the older one, and the site agent's session,
// recorded as rg_a's, was closed by the older one's end while the newer one ran.
func TestAnOlderSessionRecordsNothingOverANewerOne(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		now := time.Now()
		a, b := Holder{Replica: "rg_a", Started: now.Add(-time.Hour)}, Holder{Replica: "rg_b", Started: now.Add(-time.Hour)}
		older, newer := now.Add(-2*time.Second), now.Add(-time.Second)
		var (
			mu   sync.Mutex
			told []string
		)
		defer s.OnSessionOpened(func(node, role string, h Holder) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, node+" "+h.Replica)
		})()

		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.RecordAgentJoin("nd_1", "node", b, newer, "boot-new"); return err })
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.RecordAgentJoin("nd_1", "node", a, older, "boot-old"); return err })
		mustUpdate(t, s, func(tx *Tx) error { return tx.OpenAgentSession("st_rack", "site", b, newer) })
		mustUpdate(t, s, func(tx *Tx) error { return tx.OpenAgentSession("st_rack", "site", a, older) })
		mustUpdate(t, s, func(tx *Tx) error { return tx.CloseAgentSession("st_rack", a, older) })

		var (
			joins   map[string]AgentJoin
			session AgentSession
		)
		if err := s.View(func(tx *Tx) (err error) {
			if joins, err = tx.AgentJoins("nd_1"); err != nil {
				return err
			}
			session, _, err = tx.AgentSession("st_rack")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if j := joins["node"]; !j.Is(b) || j.BootID != "boot-new" || !j.OpenedAt.Equal(newer) {
			t.Errorf("the machine's agent's join: %s, boot %s, opened %v; want rg_b's, boot-new, opened %v", j.Replica, j.BootID, j.OpenedAt, newer)
		}
		if !session.Is(b) || !session.Connected || !session.OpenedAt.Equal(newer) {
			t.Errorf("the site agent's session: %s, connected %v, opened %v; want rg_b's, connected, opened %v", session.Replica, session.Connected, session.OpenedAt, newer)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, h := range told {
			if strings.HasSuffix(h, " rg_a") {
				t.Errorf("the hooks were told of the older session (%s): %v", h, told)
			}
		}
	})
}

// TestASessionEndsOnlyItsOwnRecord: two replicas record a site agent's sessions opened at
// the same clock reading (the later write, rg_b's, is the record); the end of rg_a's
// session leaves rg_b's open, and rg_b's own end closes it. Before, the end compared the
// opening time alone, and rg_a's closed rg_b's session while it ran.
func TestASessionEndsOnlyItsOwnRecord(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		opened := time.Now()
		a, b := Holder{Replica: "rg_a", Started: opened.Add(-time.Hour)}, Holder{Replica: "rg_b", Started: opened.Add(-time.Hour)}
		session := func() (got AgentSession) {
			t.Helper()
			if err := s.View(func(tx *Tx) (err error) { got, _, err = tx.AgentSession("st_rack"); return err }); err != nil {
				t.Fatal(err)
			}
			return got
		}
		mustUpdate(t, s, func(tx *Tx) error { return tx.OpenAgentSession("st_rack", "site", a, opened) })
		mustUpdate(t, s, func(tx *Tx) error { return tx.OpenAgentSession("st_rack", "site", b, opened) })
		mustUpdate(t, s, func(tx *Tx) error { return tx.CloseAgentSession("st_rack", a, opened) })
		if got := session(); !got.Connected || !got.Holder.Is(b) {
			t.Fatalf("after rg_a's session ended: %+v, want rg_b's, open", got)
		}
		mustUpdate(t, s, func(tx *Tx) error { return tx.CloseAgentSession("st_rack", b, opened) })
		if got := session(); got.Connected {
			t.Errorf("after rg_b's session ended: %+v, want it closed", got)
		}
	})
}
