package store

import "time"

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
