package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Holder names one run of a registry replica: its replica id and when that run started.
// The agent sessions and joins a replica records carry their holder, and count as live
// only while that holder's lease holds (Tx.Holds): a replica that died, or restarted,
// takes the sessions it held with it, even when no one saw them end.
type Holder struct {
	// Replica is the registry's replica id ("" in records made before registries named
	// themselves).
	Replica string `json:"replica,omitempty"`
	// Started is when this run of the replica started (zero in records made before
	// replicas held leases).
	Started time.Time `json:"replicaStarted,omitzero"`
}

// Is reports whether h and o name the same run of the same replica.
func (h Holder) Is(o Holder) bool { return h.Replica == o.Replica && h.Started.Equal(o.Started) }

// ReplicaLease says that a run of a registry replica is up: which run (Started), and
// until when the lease holds unrenewed (Expires, on the registry's clock).
type ReplicaLease struct {
	Started time.Time `json:"started"`
	Expires time.Time `json:"expires"`
}

// bucketReplicaLeases holds the leases: replica id -> ReplicaLease.
const bucketReplicaLeases = "replica_leases"

// TakeLease makes h's lease hold until ttl from the transaction's time, replacing the
// lease of an earlier run of the same replica: a registry takes it as it starts.
func (t *Tx) TakeLease(h Holder, ttl time.Duration) error {
	if h.Replica == "" || h.Started.IsZero() || ttl <= 0 {
		return proto.Errorf(proto.Internal, "a replica lease needs a replica, its start and a lifetime")
	}
	return t.put(bucketReplicaLeases, []byte(h.Replica), ReplicaLease{Started: h.Started, Expires: t.now.Add(ttl)})
}

// RenewLease makes h's lease, which h's run took (TakeLease), hold until ttl from the
// transaction's time, expired or not. It never takes the lease back from another run of
// the replica: a run still up after the replica's next run started (a process its
// supervisor restarted without ending it, a host paused and resumed) would otherwise
// give the new run's sessions up at every other replica, and count its own again. A
// lease another run took, or one released, is INVALID_STATE.
func (t *Tx) RenewLease(h Holder, ttl time.Duration) error {
	var l ReplicaLease
	ok, err := t.get(bucketReplicaLeases, []byte(h.Replica), &l)
	switch {
	case err != nil:
		return err
	case !ok:
		return proto.Errorf(proto.InvalidState, "replica %s holds no lease: this run (started %s) released it, or never took it", h.Replica, h.Started.Format(time.RFC3339Nano))
	case !l.Started.Equal(h.Started):
		return proto.Errorf(proto.InvalidState, "the lease of replica %s is its run started %s, not this run (started %s): a later run of the replica took it over, and counts the agents' sessions as its own; stop this run",
			h.Replica, l.Started.Format(time.RFC3339Nano), h.Started.Format(time.RFC3339Nano))
	}
	return t.TakeLease(h, ttl)
}

// ReleaseLease drops h's lease (a replica stopping); the lease of another run of the
// replica stays.
func (t *Tx) ReleaseLease(h Holder) error {
	var l ReplicaLease
	ok, err := t.get(bucketReplicaLeases, []byte(h.Replica), &l)
	if err != nil || !ok || !l.Started.Equal(h.Started) {
		return err
	}
	return t.del(bucketReplicaLeases, []byte(h.Replica))
}

// LeaseRetention is how long a replica's lease is kept once it expired: a replica id
// never started again (its data directory made anew) leaves one behind.
// PruneReplicaLeases deletes it then. A replica renews its lease every few seconds, so a
// running one never loses it; a run that renewed nothing for that long (a host paused a
// day) finds it gone, as if released, and is restarted.
const LeaseRetention = 24 * time.Hour

// PruneReplicaLeases deletes the leases that expired more than LeaseRetention before the
// transaction's time, of the replica ids after after (all when nil), at most MaxPruned
// of them, and returns how many and where the next transaction goes on from (nil once it
// read the last; Store.PruneOnward). What they said is what a missing lease says: no
// session or join their runs recorded is live (Holds), and RanUntil names no time for
// them, a day or more gone.
func (t *Tx) PruneReplicaLeases(after []byte) (int, []byte, error) {
	cutoff := t.now.Add(-LeaseRetention)
	return pruneBucket(t, bucketReplicaLeases, after, func(_ []byte, l ReplicaLease) bool { return l.Expires.Before(cutoff) },
		func(k []byte, _ ReplicaLease) error { return t.del(bucketReplicaLeases, k) })
}

// Holds reports whether h's lease holds at the transaction's time: h's replica holds a
// lease, of the run h names, not expired.
func (t *Tx) Holds(h Holder) (bool, error) {
	if h.Replica == "" || h.Started.IsZero() {
		return false, nil
	}
	var l ReplicaLease
	ok, err := t.get(bucketReplicaLeases, []byte(h.Replica), &l)
	return err == nil && ok && l.Started.Equal(h.Started) && t.now.Before(l.Expires), err
}

// RanUntil is the latest time h's run is known to have run, as tx reads the leases:
// when its lease expires, or expired, while the lease is still that run's; the start of
// the replica's later run once one replaced it; zero when the lease is gone (the run
// stopped and released it) or h names no run.
func (t *Tx) RanUntil(h Holder) (time.Time, error) {
	if h.Replica == "" {
		return time.Time{}, nil
	}
	var l ReplicaLease
	ok, err := t.get(bucketReplicaLeases, []byte(h.Replica), &l)
	switch {
	case err != nil || !ok:
		return time.Time{}, err
	case l.Started.Equal(h.Started):
		return l.Expires, nil
	case l.Started.After(h.Started):
		return l.Started, nil
	}
	return time.Time{}, nil
}
