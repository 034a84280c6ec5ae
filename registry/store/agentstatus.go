package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

const bucketAgentStatus = "agent-status"

// AgentStatus is what a node's agent last reported about its NodeSpec.
type AgentStatus struct {
	Node string `json:"node"`
	// ObservedGeneration is the NodeSpec generation the agent has applied.
	ObservedGeneration int64 `json:"observedGeneration"`
	// FailedGeneration and ApplyError tell of the last generation the agent failed to
	// apply; a later applied generation clears them.
	FailedGeneration int64        `json:"failedGeneration,omitempty"`
	ApplyError       *proto.Error `json:"applyError,omitempty"`
	UpdatedAt        time.Time    `json:"updatedAt"`
}

// AgentStatus returns a node's agent status, NOT_FOUND when no agent has reported.
func (t *Tx) AgentStatus(node string) (AgentStatus, error) {
	var st AgentStatus
	ok, err := t.get(bucketAgentStatus, []byte(node), &st)
	if err == nil && !ok {
		err = notFound("agent status of node", node)
	}
	return st, err
}

// RecordObservedGeneration records that node's agent has applied generation. It writes
// only when something changes, so a reconnect that reports what is stored costs a read.
func (t *Tx) RecordObservedGeneration(node string, generation int64) error {
	st, err := t.agentStatus(node)
	if err != nil {
		return err
	}
	if st.ObservedGeneration == generation && (st.ApplyError == nil || generation < st.FailedGeneration) {
		return nil
	}
	st.ObservedGeneration = generation
	if generation >= st.FailedGeneration {
		st.FailedGeneration, st.ApplyError = 0, nil
	}
	st.UpdatedAt = t.now
	return t.put(bucketAgentStatus, []byte(node), st)
}

// RecordApplyFailure records that node's agent failed to apply generation.
func (t *Tx) RecordApplyFailure(node string, generation int64, applyErr *proto.Error) error {
	st, err := t.agentStatus(node)
	if err != nil {
		return err
	}
	st.FailedGeneration, st.ApplyError, st.UpdatedAt = generation, applyErr, t.now
	return t.put(bucketAgentStatus, []byte(node), st)
}

// agentStatus returns the stored status, or a new one for a node never seen.
func (t *Tx) agentStatus(node string) (AgentStatus, error) {
	if err := proto.CheckNodeID(node); err != nil {
		return AgentStatus{}, err
	}
	st, err := t.AgentStatus(node)
	if proto.CodeOf(err) == proto.NotFound {
		return AgentStatus{Node: node}, nil
	}
	return st, err
}
