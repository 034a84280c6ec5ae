package store

import (
	"testing"
	"time"
)

// TestRunClaimExclusive: a run's claim is its owner's until it expires on the store's
// clock, renewals extend it, another owner takes it only after it expired, and only its
// holder releases it; a later run of its owner takes it at once, and an earlier run of
// the owner never takes it back.
func TestRunClaimExclusive(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) { testRunClaimExclusive(t, open) })
}

func testRunClaimExclusive(t *testing.T, open opener) {
	st, clk := openOnFakeClock(t, open)
	started := clk.Now()
	claimAs := func(by Holder) bool {
		t.Helper()
		var ok bool
		if err := st.Update(func(tx *Tx) (err error) { ok, err = tx.ClaimRun("wf_1", by, 30*time.Second); return err }); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	releaseAs := func(by Holder) {
		t.Helper()
		if err := st.Update(func(tx *Tx) error { return tx.ReleaseRun("wf_1", by) }); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(owner string) bool { t.Helper(); return claimAs(Holder{Replica: owner, Started: started}) }
	release := func(owner string) { t.Helper(); releaseAs(Holder{Replica: owner, Started: started}) }
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

	// a restarts while its earlier run is still up: the later run takes the claim at
	// once, the earlier one neither takes it back nor releases it.
	restarted := Holder{Replica: "a", Started: started.Add(time.Minute)}
	if !claimAs(restarted) {
		t.Fatal("a's later run did not take the claim of its earlier run")
	}
	if claim("a") {
		t.Fatal("a's earlier run took the claim back from its later run")
	}
	release("a")
	var c RunClaim
	if err := st.View(func(tx *Tx) (err error) { c, _, err = tx.RunClaim("wf_1"); return err }); err != nil {
		t.Fatal(err)
	}
	if !c.Started.Equal(restarted.Started) {
		t.Fatalf("after a's earlier run released it, the claim is %+v, want its later run's", c)
	}
	if !claimAs(restarted) || claim("b") {
		t.Fatal("a's later run could not renew its claim, or b took it")
	}
}
