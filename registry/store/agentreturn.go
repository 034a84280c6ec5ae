package store

import (
	"bytes"
	"time"
)

const bucketAgentReturn = "agent-return"

// AgentReturn is what an agent endpoint learnt of its fleet's return after a restart,
// and what it asked of the fleet when it last stopped: the endpoint's next start (the
// same replica's, on a store replicas share) plans its return with it.
type AgentReturn struct {
	// Rate is the stream of returning agents, a second, that the next stop asks for.
	Rate float64 `json:"rate"`
	// Admission bounds the handshakes in flight.
	Admission int `json:"admission"`
	// Told is how many agents the last stop told to come back (0 when none did), at
	// Rate; StoppedAt is when.
	Told      int       `json:"told"`
	StoppedAt time.Time `json:"stoppedAt"`
	// MeasuredRate, Accepted, Refused and MeanHandshake are what the last measured return
	// did: the handshakes a second completed while the machine was saturated (first
	// packets were refused), or 0 if none was refused; the handshakes completed, and the
	// attempts refused (by the agents' count, told in their hellos; registry/agents);
	// and the mean time from an attempt's first packet to its acceptance.
	MeasuredRate  float64       `json:"measuredRate,omitempty"`
	Accepted      int64         `json:"accepted,omitempty"`
	Refused       int64         `json:"refused,omitempty"`
	MeanHandshake time.Duration `json:"meanHandshake,omitempty"`
	// Restart is how long the endpoint's last measured restart took, from the moment
	// its stop timed the stream from (StoppedAt) until the next endpoint listened again,
	// and RestartTold how many agents that stop told; 0 when none was measured. The next
	// stop starts its stream at the sooner of the time telling its fleet takes and a
	// quarter past it, scaled to that fleet (registry/agents).
	Restart     time.Duration `json:"restart,omitempty"`
	RestartTold int           `json:"restartTold,omitempty"`
}

// AgentReturn returns the return plan of replica's endpoint ("" for a registry alone on
// its store); ok is false when none is stored.
func (t *Tx) AgentReturn(replica string) (r AgentReturn, ok bool, err error) {
	ok, err = t.get(bucketAgentReturn, agentReturnKey(replica), &r)
	return r, ok, err
}

// PutAgentReturn stores the return plan of replica's endpoint ("" for a registry alone on
// its store).
func (t *Tx) PutAgentReturn(replica string, r AgentReturn) error {
	return t.put(bucketAgentReturn, agentReturnKey(replica), r)
}

// agentReturnKey is where replica's plan is kept: under its replica id on a store
// replicas share, each replica planning from its own stop and its own machine; under
// "plan" for a registry alone on its store.
func agentReturnKey(replica string) []byte {
	if replica == "" {
		return []byte("plan")
	}
	return []byte(replica)
}

// AgentReturnRetention is how long the return plan of a replica id that holds no lease
// is kept once the stream its last stop asked for ended (MaxReturnDelay after the stop
// at most): a replica id never started again (its data directory made anew) leaves its
// plan behind, as it leaves its lease (LeaseRetention). PruneAgentReturns deletes it then.
const AgentReturnRetention = 24 * time.Hour

// PruneAgentReturns deletes the return plans of the replica ids after after (all when
// nil) whose replica holds no lease (it stopped and released it, or PruneReplicaLeases
// deleted it a day after its expiry) and whose last stop was more than MaxReturnDelay
// and AgentReturnRetention before the transaction's time, at most MaxPruned of them, and
// returns how many and where the next transaction goes on from (nil once it read the
// last; Store.PruneOnward). The plan of a registry alone on its store stays: it starts
// again on that store, or on none. A running replica holds its lease, and keeps its plan
// however long ago it last stopped; one started after its plan was pruned plans its
// return from the defaults, as its first start did.
func (t *Tx) PruneAgentReturns(after []byte) (int, []byte, error) {
	cutoff := t.now.Add(-MaxReturnDelay - AgentReturnRetention)
	alone := agentReturnKey("")
	return pruneBucket(t, bucketAgentReturn, after, func(replica []byte, r AgentReturn) bool {
		return !bytes.Equal(replica, alone) && r.StoppedAt.Before(cutoff) && t.getRaw(bucketReplicaLeases, replica) == nil
	}, func(replica []byte, _ AgentReturn) error { return t.del(bucketAgentReturn, replica) })
}
