package store

import (
	"testing"
	"time"
)

// TestRunClaimExclusive: a run's claim is its owner's until it expires on the store's
// clock, renewals extend it, another owner takes it only after it expired, and only its
// holder releases it.
func TestRunClaimExclusive(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) { testRunClaimExclusive(t, open) })
}

func testRunClaimExclusive(t *testing.T, open opener) {
	st, clk := openOnFakeClock(t, open)
	claim := func(owner string) bool {
		t.Helper()
		var ok bool
		if err := st.Update(func(tx *Tx) (err error) { ok, err = tx.ClaimRun("wf_1", owner, 30*time.Second); return err }); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	release := func(owner string) {
		t.Helper()
		if err := st.Update(func(tx *Tx) error { return tx.ReleaseRun("wf_1", owner) }); err != nil {
			t.Fatal(err)
		}
	}
	if !claim("a") || claim("b") {
		t.Fatal("a did not get the free claim, or b took a's")
	}
	clk.Advance(20 * time.Second)
	if !claim("a") {
		t.Fatal("a could not renew its claim")
	}
	clk.Advance(29 * time.Second) // 49s: a's renewed claim holds until 50s
	if claim("b") {
		t.Fatal("b took a renewed claim before it expired")
	}
	release("b")
	clk.Advance(time.Second) // 50s: expired
	if !claim("b") || claim("a") {
		t.Fatal("b did not take the expired claim, or a took it back")
	}
	release("a")
	if claim("a") {
		t.Fatal("a released b's claim")
	}
	release("b")
	if !claim("a") {
		t.Fatal("a could not take the claim b released")
	}
}
