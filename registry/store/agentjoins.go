package store

import "time"

// AgentJoin is the last time an agent of one role joined as a node (a join admitted, or,
// once agent sessions report them, a session opened).
type AgentJoin struct {
	Node     string    `json:"node"`
	Role     string    `json:"role"`
	JoinedAt time.Time `json:"joinedAt"`
}

const bucketAgentJoins = "agent_joins"

// RecordAgentJoin records that node's agent of role joined now.
func (t *Tx) RecordAgentJoin(node, role string) (AgentJoin, error) {
	j := AgentJoin{Node: node, Role: role, JoinedAt: t.now}
	return j, t.put(bucketAgentJoins, []byte(node+"\x00"+role), j)
}

// AgentJoins returns the last join of each role of node's agents, by role.
func (t *Tx) AgentJoins(node string) (map[string]AgentJoin, error) {
	out := map[string]AgentJoin{}
	_, err := t.scan(bucketAgentJoins, []byte(node+"\x00"), Page{}, func(k, v []byte) (bool, error) {
		var j AgentJoin
		if err := decode(bucketAgentJoins, k, v, &j); err != nil {
			return false, err
		}
		out[j.Role] = j
		return true, nil
	})
	return out, err
}
