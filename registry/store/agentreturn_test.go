package store

import "testing"

// TestAgentReturnPerReplica: the return plans of two replicas and that of a registry
// alone on its store ("") are kept apart: each reads back its own, and one replica's
// plan is not another's that stored none.
func TestAgentReturnPerReplica(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		st, _ := openOnFakeClock(t, open)
		plans := map[string]AgentReturn{"rg_a": {Rate: 900, Admission: 128, Told: 3}, "rg_b": {Rate: 450, Admission: 64, Told: 1}, "": {Rate: 1200, Admission: 192}}
		err := st.Update(func(tx *Tx) error {
			for replica, plan := range plans {
				if err := tx.PutAgentReturn(replica, plan); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = st.View(func(tx *Tx) error {
			for replica, want := range plans {
				if got, ok, err := tx.AgentReturn(replica); err != nil || !ok || got != want {
					t.Errorf("plan of %q: %+v, %v, %v; want %+v", replica, got, ok, err, want)
				}
			}
			if got, ok, err := tx.AgentReturn("rg_c"); err != nil || ok {
				t.Errorf("plan of a replica that stored none: %+v, %v, %v; want none", got, ok, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
