package store

import "time"

// AgentJoin is the last time an agent of one role joined as a node (a join admitted, or,
// once agent sessions report them, a session opened).
type AgentJoin struct {
	Node     string    `json:"node"`
	Role     string    `json:"role"`
	JoinedAt time.Time `json:"joinedAt"`
	// Holder is the run of the registry replica that recorded the join: the join's
	// session lasts at most as long as its lease (Tx.Holds). Zero for a join the
	// JoinService admitted: no session holds it yet.
	Holder
	// LeftAt is when the agent's session of this join ended while its registry ran;
	// zero while the session lasts, and when its registry stopped or died first.
	LeftAt time.Time `json:"leftAt,omitzero"`
	// OpenedAt is when the session of this join opened (its hello was read), by the
	// clock of the registry that holds it: a session that opened before it is older, and
	// its join is not recorded over this one (RecordAgentJoin). Zero for a join the
	// JoinService admitted, one recorded without it, and a record of an earlier release.
	OpenedAt time.Time `json:"openedAt,omitzero"`
	// BootID is the boot id of the machine the agent said hello from
	// (proto.Hello.BootID): a session of the same boot as an earlier one is a reconnect,
	// not a new boot. Empty for a join the JoinService admitted and for an agent that
	// sent none (of an earlier version).
	BootID string `json:"bootId,omitempty"`
}

const bucketAgentJoins = "agent_joins"

// RecordAgentJoin records that node's agent of role joined now, at holder, from the boot
// bootID of the machine ("" when unknown). A join with a holder is a session opened: the
// OnSessionOpened hooks learn of it. A session's join that says when the session opened
// (opened, not zero) is recorded only when no session that opened after it is (its
// hello's write paused, and a newer session of the agent, here or at another replica,
// recorded meanwhile): an older one records nothing, the record, returned, stays the
// newer one's, and no hook hears of the older, which would take the agent's session for
// replaced by it. One of zero opened is recorded whatever is.
func (t *Tx) RecordAgentJoin(node, role string, holder Holder, opened time.Time, bootID string) (AgentJoin, error) {
	j := AgentJoin{Node: node, Role: role, JoinedAt: t.now, Holder: holder, BootID: bootID}
	if holder.Replica != "" && !opened.IsZero() {
		var stored AgentJoin
		ok, err := t.get(bucketAgentJoins, agentJoinKey(node, role), &stored)
		if err != nil {
			return j, err
		}
		if ok && opened.Before(stored.OpenedAt) {
			return stored, nil
		}
		j.OpenedAt = opened
	}
	if err := t.put(bucketAgentJoins, agentJoinKey(node, role), j); err != nil {
		return j, err
	}
	if holder.Replica != "" {
		t.store.watch.agentJoin.afterCommit(t, j)
	}
	return j, nil
}

// OnSessionOpened registers fn to be called after every commit that recorded an agent's
// session as opened by a registry (a machine's agent's join with its holder,
// RecordAgentJoin; a site agent's session, OpenAgentSession), with the agent's node,
// role and the run of the registry that holds the session, until the returned cancel is
// called: a registry holding an older session of the same agent learns that it is
// replaced. fn runs on the committing goroutine after the store's locks are released,
// so it must return quickly. On etcd it also runs for every session another replica
// recorded as opened, on the store's watch goroutine: at least once, in commit order.
func (s *Store) OnSessionOpened(fn func(node, role string, holder Holder)) (cancel func()) {
	joins := s.watch.agentJoin.add(func(j AgentJoin) {
		if j.Replica != "" && j.LeftAt.IsZero() {
			fn(j.Node, j.Role, j.Holder)
		}
	})
	sessions := s.watch.agentSession.add(func(a AgentSession) {
		if a.Connected {
			fn(a.Node, a.Role, a.Holder)
		}
	})
	return func() { joins(); sessions() }
}

// RecordAgentLeft records that the session of node's agent of role that holder held
// ended at endedAt. A join recorded after endedAt (a new session, here or at another
// replica) or by another holder is left as it is.
func (t *Tx) RecordAgentLeft(node, role string, holder Holder, endedAt time.Time) error {
	var j AgentJoin
	ok, err := t.get(bucketAgentJoins, agentJoinKey(node, role), &j)
	if err != nil || !ok || !j.Is(holder) || !j.LeftAt.IsZero() || j.JoinedAt.After(endedAt) {
		return err
	}
	j.LeftAt = endedAt
	return t.put(bucketAgentJoins, agentJoinKey(node, role), j)
}

func agentJoinKey(node, role string) []byte { return []byte(node + "\x00" + role) }

// AgentJoins returns the last join of each role of node's agents, by role.
func (t *Tx) AgentJoins(node string) (map[string]AgentJoin, error) {
	out := map[string]AgentJoin{}
	_, err := t.scan(bucketAgentJoins, []byte(node+"\x00"), Page{}, func(k, v []byte) (func(), error) {
		var j AgentJoin
		if err := decode(bucketAgentJoins, k, v, &j); err != nil {
			return nil, err
		}
		return func() { out[j.Role] = j }, nil
	})
	return out, err
}
