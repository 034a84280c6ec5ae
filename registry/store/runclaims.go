package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// RunClaim says which registry drives a running workflow: its owner, until Expires on
// the registry's clock. The owner renews it while it drives the run; once it expires any
// replica may take the run over. A transaction reads and writes it with the run, so at
// most one owner holds a run's claim at any moment.
type RunClaim struct {
	Owner   string    `json:"owner"`
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

// ClaimRun makes owner the driver of run until ttl from the transaction's time: it
// takes a claim no one holds or whose holder let it expire, and renews owner's own. It
// reports false, and changes nothing, while another owner's claim holds.
func (t *Tx) ClaimRun(run, owner string, ttl time.Duration) (bool, error) {
	if owner == "" || ttl <= 0 {
		return false, proto.Errorf(proto.Internal, "a run claim needs an owner and a lifetime")
	}
	c, ok, err := t.RunClaim(run)
	if err != nil {
		return false, err
	}
	if ok && c.Owner != owner && t.now.Before(c.Expires) {
		return false, nil
	}
	return true, t.put(bucketRunClaims, []byte(run), RunClaim{Owner: owner, Expires: t.now.Add(ttl)})
}

// ReleaseRun drops owner's claim of run; another owner's claim stays.
func (t *Tx) ReleaseRun(run, owner string) error {
	c, ok, err := t.RunClaim(run)
	if err != nil || !ok || c.Owner != owner {
		return err
	}
	return t.del(bucketRunClaims, []byte(run))
}
