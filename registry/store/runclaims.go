package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// RunClaim says which registry drives a running workflow: its owner, the run of that
// registry that took the claim, until Expires on the registry's clock. The owner renews
// it while it drives the run; once it expires any replica may take the run over. A
// transaction reads and writes it with the run, so at most one run of one owner holds a
// run's claim at any moment.
type RunClaim struct {
	Owner string `json:"owner"`
	// Started is when the run of the owner that holds the claim started (Holder.Started):
	// a later run of the owner (a restart) takes it at once, an earlier one never. Zero
	// in claims taken before claims recorded it.
	Started time.Time `json:"started,omitzero"`
	Expires time.Time `json:"expires"`
}

// bucketRunClaims holds the claims: run id -> RunClaim.
const bucketRunClaims = "run_claims"

// RunClaim returns the claim of run, false when none is held.
func (t *Tx) RunClaim(run string) (RunClaim, bool, error) {
	var c RunClaim
	ok, err := t.get(bucketRunClaims, []byte(run), &c)
	return c, ok, err
}

// ClaimRun makes by, a run of a registry (its Replica the claim's owner), the driver of
// run until ttl from the transaction's time: it takes a claim no one holds or whose
// holder let it expire, renews its own, and takes one of an earlier run of its owner
// (a restarted registry takes its runs back at once). It reports false, and changes
// nothing, while another owner's claim holds, or a later run of its owner's: a run of a
// registry still up after its next run started (restarted without being ended, or
// paused and resumed) drives none of the runs that run took back.
func (t *Tx) ClaimRun(run string, by Holder, ttl time.Duration) (bool, error) {
	if by.Replica == "" || ttl <= 0 {
		return false, proto.Errorf(proto.Internal, "a run claim needs an owner and a lifetime")
	}
	c, ok, err := t.RunClaim(run)
	if err != nil {
		return false, err
	}
	if ok && t.now.Before(c.Expires) && !c.HeldBy(by) {
		return false, nil
	}
	return true, t.put(bucketRunClaims, []byte(run), RunClaim{Owner: by.Replica, Started: by.Started, Expires: t.now.Add(ttl)})
}

// HeldBy reports whether the claim is by's own, or an earlier run of by's owner's,
// which by takes at its next claim.
func (c RunClaim) HeldBy(by Holder) bool {
	return c.Owner == by.Replica && !c.Started.After(by.Started)
}

// takenBy reports whether the claim was taken by the run by itself.
func (c RunClaim) takenBy(by Holder) bool {
	return c.Owner == by.Replica && c.Started.Equal(by.Started)
}

// ReleaseRun drops by's claim of run; another owner's claim stays, and so does the claim
// of another run of by's owner: a run that stops does not give up what the owner's later
// run took back.
func (t *Tx) ReleaseRun(run string, by Holder) error {
	c, ok, err := t.RunClaim(run)
	if err != nil || !ok || !c.takenBy(by) {
		return err
	}
	return t.del(bucketRunClaims, []byte(run))
}
