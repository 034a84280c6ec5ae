package store

import (
	"testing"
	"time"
)

// TestAgentStops, on each backend: a run's stop records the moment it asked its agents
// back by, per run (a later run of the same replica, or another replica, has its own):
// the stream's end and a quarter of it (at least a second) for an agent refused on its
// return and re-slotted, never more than MaxReturnDelay and its quarter after the stop;
// a run that recorded none has none; a stop whose return ended more than a day ago is
// forgotten at the next stop recorded.
func TestAgentStops(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		st, clk := openOnFakeClock(t, open)
		first := Holder{Replica: "rg_a", Started: clk.Now()}
		clk.Advance(time.Hour)
		second, other := Holder{Replica: "rg_a", Started: clk.Now()}, Holder{Replica: "rg_b", Started: first.Started}
		update := func(fn func(tx *Tx) error) {
			t.Helper()
			if err := st.Update(fn); err != nil {
				t.Fatal(err)
			}
		}
		check := func(what string, h Holder, want time.Time) {
			t.Helper()
			var got time.Time
			if err := st.View(func(tx *Tx) (err error) { got, err = tx.AgentReturnBy(h); return err }); err != nil {
				t.Fatal(err)
			}
			if !got.Equal(want) {
				t.Errorf("%s: %+v asked its agents back by %v, want %v", what, h, got, want)
			}
		}

		check("no stop", first, time.Time{})
		stopped := clk.Now()
		update(func(tx *Tx) error { return tx.RecordAgentStop(first, 3*time.Minute, 45*time.Second) })
		// Asked back in 3 minutes, an agent refused then re-slots itself within the
		// spread the stop named after the stream's end, and refused again, within the
		// spread after that try, up to three tries.
		check("the first run stopped", first, stopped.Add(3*time.Minute+3*45*time.Second))
		check("the replica's next run runs", second, time.Time{})
		check("another replica runs", other, time.Time{})
		update(func(tx *Tx) error { return tx.RecordAgentStop(other, 3*time.Minute, 9*time.Second) })
		check("a return whose re-slots spread over 9 s", other, stopped.Add(3*time.Minute+3*9*time.Second))
		update(func(tx *Tx) error { return tx.RecordAgentStop(other, time.Hour, time.Hour) })
		check("a return and a spread asked past the bounds", other, stopped.Add(MaxReturnDelay+3*MaxReturnDelay/4))
		check("the first run, after another's stop", first, stopped.Add(3*time.Minute+3*45*time.Second))
		check("no run", Holder{}, time.Time{})
		if err := st.Update(func(tx *Tx) error { return tx.RecordAgentStop(Holder{}, time.Minute, time.Second) }); err == nil {
			t.Error("a stop of no run recorded")
		}
		if err := st.Update(func(tx *Tx) error { return tx.RecordAgentStop(second, time.Minute, -time.Second) }); err == nil {
			t.Error("a stop with a negative re-slot spread recorded")
		}

		clk.Advance(agentStopKept + MaxReturnDelay + 3*MaxReturnDelay/4 + time.Second)
		update(func(tx *Tx) error { return tx.RecordAgentStop(second, 0, time.Second) })
		check("the second run stopped", second, clk.Now().Add(3*time.Second))
		check("the first run, a day after its return", first, time.Time{})
		check("the other replica's run, a day after its return", other, time.Time{})
	})
}
