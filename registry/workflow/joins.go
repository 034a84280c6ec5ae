package workflow

import (
	"context"
	"sync"
	"time"

	"github.com/better-compute/better-compute/registry/store"
)

// Joins tells when a machine's agents join: what await: rejoin, wait.agentJoined and
// metal.ensureRamdisk wait for.
type Joins interface {
	// WaitJoined returns once node's agent of role has joined at or after since; role ""
	// is any agent of the machine (its ramdisk or its installed OS). It returns ctx's
	// error when ctx ends first.
	WaitJoined(ctx context.Context, node, role string, since time.Time) error
	// Connected reports whether node's agent of role is the machine's agent now.
	Connected(ctx context.Context, node, role string) (bool, error)
}

// machineRoles are the roles of the agents that run on a machine, in no order.
var machineRoles = []string{"ramdisk", "node"}

// JoinLog is the Joins of a registry: it records each join in the store (so a restarted
// registry still knows it) and wakes whoever waits. Until agent sessions report their
// connections, the machine's agent is the one that joined last.
type JoinLog struct {
	store *store.Store
	// holder is the run of the registry recording the joins (store.AgentJoin.Holder).
	holder  store.Holder
	mu      sync.Mutex
	changed chan struct{}
}

// NewJoinLog returns the JoinLog of the registry run holder over st. Every commit that
// records a join, this registry's or (on etcd) another replica's, wakes the waiters.
func NewJoinLog(st *store.Store, holder store.Holder) *JoinLog {
	l := &JoinLog{store: st, holder: holder, changed: make(chan struct{})}
	st.OnWrite(l.wake, store.BucketAgentJoins)
	return l
}

// Joined records that node's agent of role joined now. It is called for every agent
// session that opens, thousands a second while a fleet returns, so the records of
// concurrent calls share one transaction and one fsync (store.Store.Batch); each call
// returns once its record is committed.
func (l *JoinLog) Joined(node, role string) error {
	return l.store.Batch(func(tx *store.Tx) error { _, err := tx.RecordAgentJoin(node, role, l.holder); return err })
}

// Left records that the session of node's agent of role this registry held ended at
// endedAt (store.Tx.RecordAgentLeft), in a transaction shared as Joined's.
func (l *JoinLog) Left(node, role string, endedAt time.Time) error {
	return l.store.Batch(func(tx *store.Tx) error { return tx.RecordAgentLeft(node, role, l.holder, endedAt) })
}

// ConnectedElsewhere reports whether, as tx reads the joins, node's agent of role is the
// machine's agent and holds a session with another registry replica: its last join was
// recorded by another replica, that replica has not seen the session end, and the run
// of it that recorded the join still holds its lease (store.Tx.Holds): a replica that
// died, or restarted, took the session with it.
func (l *JoinLog) ConnectedElsewhere(tx *store.Tx, node, role string) (bool, error) {
	joins, err := tx.AgentJoins(node)
	if err != nil {
		return false, err
	}
	j, ok := current(joins, role)
	if !ok || j.Replica == "" || j.Replica == l.holder.Replica || !j.LeftAt.IsZero() {
		return false, nil
	}
	return tx.Holds(j.Holder)
}

// wake wakes everyone waiting for a join.
func (l *JoinLog) wake() {
	l.mu.Lock()
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// WaitJoined returns once node's agent of role has joined at or after since.
func (l *JoinLog) WaitJoined(ctx context.Context, node, role string, since time.Time) error {
	for {
		l.mu.Lock()
		changed := l.changed
		l.mu.Unlock()
		joins, err := l.joins(node)
		if err != nil {
			return err
		}
		for r, j := range joins {
			if (role == "" || r == role) && !j.JoinedAt.Before(since) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// Connected reports whether node's agent of role joined, and joined after the machine's
// other agent.
func (l *JoinLog) Connected(_ context.Context, node, role string) (bool, error) {
	joins, err := l.joins(node)
	if err != nil {
		return false, err
	}
	_, ok := current(joins, role)
	return ok, nil
}

// current is the last join of role among a node's joins, if role's agent joined after
// the machine's other agent.
func current(joins map[string]store.AgentJoin, role string) (store.AgentJoin, bool) {
	j, ok := joins[role]
	if !ok {
		return j, false
	}
	for _, other := range machineRoles {
		if o, ok := joins[other]; ok && other != role && o.JoinedAt.After(j.JoinedAt) {
			return j, false
		}
	}
	return j, true
}

func (l *JoinLog) joins(node string) (joins map[string]store.AgentJoin, err error) {
	err = l.store.View(func(tx *store.Tx) error { joins, err = tx.AgentJoins(node); return err })
	return joins, err
}
