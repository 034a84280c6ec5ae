package store

import (
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
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.RecordAgentJoin("nd_1", "node", at, before); return err })
		mustUpdate(t, s, func(tx *Tx) error { return tx.RecordAgentLeft("nd_1", "node", at, time.Now()) })
		check("a session of the node that ended", map[string]string{"node": before})
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.RecordAgentJoin("nd_1", "ramdisk", Holder{}, ""); return err })
		check("a ramdisk admitted", map[string]string{"node": before, "ramdisk": ""})
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.RecordAgentJoin("nd_1", "ramdisk", at, after); return err })
		check("the ramdisk's session", map[string]string{"node": before, "ramdisk": after})
	})
}
