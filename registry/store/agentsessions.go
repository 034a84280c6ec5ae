package store

import "time"

// AgentSession is the last session of an agent as the registry that held it recorded
// it: when it opened, whether it is still open, and when the agent was last seen (the
// session's hello, or its end). It is kept in the store rather than in a registry's
// memory so that every registry sharing the store answers the same.
type AgentSession struct {
	Node string `json:"node"`
	Role string `json:"role"`
	// OpenedAt is when the session opened, by the clock of the registry holding it: a
	// session's end is recorded only while the record is still that session's.
	OpenedAt time.Time `json:"openedAt"`
	// Connected is whether the session was still open when last recorded: it is open
	// only while its Holder's lease holds too (Live).
	Connected bool      `json:"connected"`
	LastSeen  time.Time `json:"lastSeen"`
	// Holder is the run of the registry replica that held the session.
	Holder
}

const bucketAgentSessions = "agent_sessions"

// OpenAgentSession records that node's agent of role opened a session at opened with
// holder, replacing the record of any older one; the OnSessionOpened hooks learn of it.
// A session that opened before the one recorded (its hello's write paused, and a newer
// session of the agent, here or at another replica, recorded meanwhile) is older, and
// records nothing: the record stays the newer one's, whose end alone closes it
// (CloseAgentSession), and no hook hears of the older, which would take the agent's
// session for replaced by it.
func (t *Tx) OpenAgentSession(node, role string, holder Holder, opened time.Time) error {
	if stored, ok, err := t.AgentSession(node); err != nil || ok && opened.Before(stored.OpenedAt) {
		return err
	}
	s := AgentSession{Node: node, Role: role, OpenedAt: opened, Connected: true, LastSeen: t.now, Holder: holder}
	if err := t.put(bucketAgentSessions, []byte(node), s); err != nil {
		return err
	}
	t.store.watch.agentSession.afterCommit(t, s)
	return nil
}

// Live reports whether s is open as tx reads it: recorded open by a holder whose lease
// holds. A session whose registry died, or restarted, without recording its end is not.
func (s AgentSession) Live(tx *Tx) (bool, error) {
	if !s.Connected {
		return false, nil
	}
	return tx.Holds(s.Holder)
}

// CloseAgentSession records that the session of node's agent that holder opened at
// opened ended, unless a newer session (on this registry or another sharing the store)
// replaced it. The record is that session's when it names both its holder and its
// opening: two sessions opened at the same clock reading, at two replicas, are told apart
// by their holders (before, the end of either closed the record of the other).
func (t *Tx) CloseAgentSession(node string, holder Holder, opened time.Time) error {
	s, ok, err := t.AgentSession(node)
	if err != nil || !ok || !s.OpenedAt.Equal(opened) || !s.Holder.Is(holder) {
		return err
	}
	s.Connected, s.LastSeen = false, t.now
	return t.put(bucketAgentSessions, []byte(node), s)
}

// AgentSession returns the last session of node's agent, and false when it never had one
// recorded.
func (t *Tx) AgentSession(node string) (AgentSession, bool, error) {
	var s AgentSession
	ok, err := t.get(bucketAgentSessions, []byte(node), &s)
	return s, ok, err
}
