package workflow

import (
	"context"
	"sync"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// Joins tells when a machine's agents join, and when its site's agent is connected:
// what await: rejoin, wait.agentJoined and metal.ensureRamdisk wait for.
type Joins interface {
	// WaitJoined returns once node's agent of role has joined at or after since from a
	// boot of the machine other than boot (newBoot); role "" is any agent of the machine
	// (its ramdisk or its installed OS). It returns ctx's error when ctx ends first.
	WaitJoined(ctx context.Context, node, role string, since time.Time, boot string) error
	// Presence tells whether node's agent of role is the machine's agent, and whether
	// its session is open or when it ended.
	Presence(ctx context.Context, node, role string) (Presence, error)
	// WaitReturn returns node's agent of role's Presence once that agent holds a session
	// again (Presence.Live) or is no longer the machine's agent (the machine's other
	// agent joined after it: not Presence.Current). It returns ctx's error when ctx ends
	// first.
	WaitReturn(ctx context.Context, node, role string) (Presence, error)
	// WaitSiteAgent returns once the agent of site holds a session, with this registry
	// or another replica, at once when it does already (wait.agentJoined role site). It
	// returns ctx's error when ctx ends first.
	WaitSiteAgent(ctx context.Context, site string) error
}

// ReconnectGrace is how long after its session ended an agent that still runs has
// connected again: within its keep-alive period (bcd pings every 25 s and gives a
// session up 10 s after a ping nothing answered) it learns that its session is gone, its
// backoff waits at most 30 s between tries, and a try is given up after 5 s of silence
// (agent/session: DefaultKeepAlive, DefaultMaxBackoff, handshakeTimeout). An agent whose
// session ended longer ago than this and that did not come back is taken for gone.
const ReconnectGrace = time.Minute

// Presence is what the joins tell of an agent of a machine.
type Presence struct {
	// Current is whether the agent joined, and after the machine's other agent: its
	// last session is the machine's last.
	Current bool
	// JoinedAt is when the agent last joined; OtherJoinedAt, when it is not Current
	// because the machine's other agent joined after it (the machine booted its disk,
	// or its ramdisk), when that one joined.
	JoinedAt, OtherJoinedAt time.Time
	// Live is whether the agent's last session is open (whether or not it is Current):
	// recorded by this run of the registry and not ended, or recorded by a run of a
	// replica whose lease holds (store.Tx.Holds).
	Live bool
	// EndedAt is, for a session that is not live, when it ended as the registry
	// that held it recorded it (Recorded: store.AgentJoin.LeftAt). A registry that
	// stopped or died takes its sessions with it without recording their end, and a
	// join admitted has no session yet: EndedAt is then the latest time the run of the
	// registry that recorded the join is known to have run (store.Tx.RanUntil), the
	// start of this registry's run, the join, or the moment that run, stopping, asked
	// its agents to come back by (ReturnBy), whichever is later, since the agent's
	// reconnect time counts from there.
	EndedAt  time.Time
	Recorded bool
	// ReturnBy is, for a session whose end is not recorded, the moment the registry run
	// that held it asked its agents to come back by when it stopped: the end of the
	// stream it told them of and the spread within which an agent refused on its return
	// tries again (proto.ReslotSpread, store.Tx.AgentReturnBy); zero when that run died
	// without telling or still runs.
	ReturnBy time.Time
}

// JoinLog is the Joins of a registry: it records each join, and each site agent's
// session, in the store (so a restarted registry, and every replica, still knows it) and
// wakes whoever waits. The machine's agent is the one that
// joined last; whether its session is still open, Presence tells.
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
	st.OnWrite(l.wake, store.BucketAgentJoins, store.BucketAgentSessions)
	return l
}

// Session records that node's agent of role opened a session with this registry at
// opened, from the machine's boot bootID (its hello's, "" when it sent none): a machine's
// agent's as its join (Joined: a rejoin after a plain reboot reconnects without join.join
// and must count; a reconnect in the same boot must not count as the machine's return);
// a site agent's, whose node is its site's id (the name its certificate carries), as the
// site's agent session (store.Tx.OpenAgentSession), which the sites' view and
// WaitSiteAgent read. A session that opened before the one recorded (its write paused
// while a newer session of the agent was recorded) records nothing. It returns once the
// record is committed; its error is the store's.
func (l *JoinLog) Session(node, role string, opened time.Time, bootID string) error {
	if role != string(proto.RoleSite) {
		return l.record(node, role, l.holder, opened, bootID)
	}
	return l.store.Update(func(tx *store.Tx) error { return tx.OpenAgentSession(node, role, l.holder, opened) })
}

// SessionEnded records that the session of node's agent of role that this registry held,
// opened at opened, ended at endedAt: a machine's agent's in its joins (Left), so that
// the other replicas no longer count it as connected; a site agent's as its session's
// end, unless a newer session replaced it (store.Tx.CloseAgentSession).
func (l *JoinLog) SessionEnded(node, role string, opened, endedAt time.Time) error {
	if role != string(proto.RoleSite) {
		return l.Left(node, role, endedAt)
	}
	return l.store.Update(func(tx *store.Tx) error { return tx.CloseAgentSession(node, l.holder, opened) })
}

// WaitSiteAgent returns once the agent of site holds a session, with this registry or
// another replica sharing the store: its session's record (store.AgentSession, under the
// site's id) is open and the run of the registry that recorded it holds its lease
// (store.AgentSession.Live), as the sites' view shows it connected. A site agent is no
// boot of a machine: one connected before the wait began counts, and the wait returns
// at once.
func (l *JoinLog) WaitSiteAgent(ctx context.Context, site string) error {
	return l.wait(ctx, func() (live bool, err error) {
		err = l.store.View(func(tx *store.Tx) error {
			s, ok, err := tx.AgentSession(site)
			if err != nil || !ok {
				return err
			}
			live, err = s.Live(tx)
			return err
		})
		return live, err
	})
}

// Joined records that node's agent of role joined now from the machine's boot bootID
// (its hello's, "" when it sent none), its session held by this registry, over whatever
// join is recorded: Session records a session's join with when it opened, which an older
// session's does not replace. Every agent session that opens is recorded so, thousands a
// second while a fleet returns, so the records of concurrent calls share one transaction
// and one fsync (store.Store.Batch); each call returns once its record is committed.
func (l *JoinLog) Joined(node, role, bootID string) error {
	return l.record(node, role, l.holder, time.Time{}, bootID)
}

// Admitted records that the JoinService admitted node's agent of role now: a join that
// no session holds yet (no holder) and of no boot id known, until the agent's session
// opens and replaces it.
func (l *JoinLog) Admitted(node, role string) error {
	return l.record(node, role, store.Holder{}, time.Time{}, "")
}

// record records a join of node's agent of role now, at holder, its session opened at
// opened (zero when not known), from the boot bootID, in a transaction shared with the records
// of concurrent calls (store.Tx.RecordAgentJoin: a session older than the one recorded
// records nothing).
func (l *JoinLog) record(node, role string, holder store.Holder, opened time.Time, bootID string) error {
	return l.store.Batch(func(tx *store.Tx) error {
		_, err := tx.RecordAgentJoin(node, role, holder, opened, bootID)
		return err
	})
}

// Left records that the session of node's agent of role this registry held ended at
// endedAt (store.Tx.RecordAgentLeft), in a transaction shared as Joined's.
func (l *JoinLog) Left(node, role string, endedAt time.Time) error {
	return l.store.Batch(func(tx *store.Tx) error { return tx.RecordAgentLeft(node, role, l.holder, endedAt) })
}

// Stopping records that this run of the registry, stopping, asked the agents whose
// sessions it holds to come back within returnIn, the stream's end, and within spread
// after it when refused (store.Tx.RecordAgentStop): their joins count as ended no earlier
// than that (Presence.ReturnBy).
func (l *JoinLog) Stopping(returnIn, spread time.Duration) error {
	return l.store.Update(func(tx *store.Tx) error { return tx.RecordAgentStop(l.holder, returnIn, spread) })
}

// ConnectedElsewhere is, as tx reads the joins, the other registry replica with which
// node's agent of role, the machine's agent, holds a session, "" when none does: its
// last join was recorded by another replica, that replica has not seen the session end,
// and the run of it that recorded the join still holds its lease (store.Tx.Holds): a
// replica that died, or restarted, took the session with it.
func (l *JoinLog) ConnectedElsewhere(tx *store.Tx, node, role string) (replica string, err error) {
	joins, err := tx.AgentJoins(node)
	if err != nil {
		return "", err
	}
	j, other := current(joins, role)
	if j.JoinedAt.IsZero() || !other.IsZero() || j.Replica == "" || j.Replica == l.holder.Replica || !j.LeftAt.IsZero() {
		return "", nil
	}
	if held, err := tx.Holds(j.Holder); !held {
		return "", err
	}
	return j.Replica, nil
}

// Presence tells whether node's agent of role is the machine's agent, and whether its
// session is open or when it ended (Presence).
func (l *JoinLog) Presence(_ context.Context, node, role string) (p Presence, err error) {
	err = l.store.View(func(tx *store.Tx) error { p, err = l.presence(tx, node, role); return err })
	return p, err
}

func (l *JoinLog) presence(tx *store.Tx, node, role string) (Presence, error) {
	joins, err := tx.AgentJoins(node)
	if err != nil {
		return Presence{}, err
	}
	j, other := current(joins, role)
	if j.JoinedAt.IsZero() {
		return Presence{}, nil
	}
	p := Presence{Current: other.IsZero(), JoinedAt: j.JoinedAt, OtherJoinedAt: other}
	switch {
	case !j.LeftAt.IsZero():
		p.EndedAt, p.Recorded = j.LeftAt, true
	case j.Is(l.holder):
		p.Live = true
	default:
		if p.Live, err = tx.Holds(j.Holder); err != nil || p.Live {
			return p, err
		}
		ran, err := tx.RanUntil(j.Holder)
		if err != nil {
			return p, err
		}
		if p.ReturnBy, err = tx.AgentReturnBy(j.Holder); err != nil {
			return p, err
		}
		p.EndedAt = latest(j.JoinedAt, l.holder.Started, ran, p.ReturnBy)
	}
	return p, nil
}

// latest is the latest of times.
func latest(times ...time.Time) time.Time {
	var t time.Time
	for _, u := range times {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// wake wakes everyone waiting for a join.
func (l *JoinLog) wake() {
	l.mu.Lock()
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// WaitJoined returns once node's agent of role has joined at or after since from a boot
// of the machine other than boot (newBoot).
func (l *JoinLog) WaitJoined(ctx context.Context, node, role string, since time.Time, boot string) error {
	return l.wait(ctx, func() (bool, error) {
		joins, err := l.joins(node)
		for r, j := range joins {
			if (role == "" || r == role) && !j.JoinedAt.Before(since) && newBoot(j, boot) {
				return true, err
			}
		}
		return false, err
	})
}

// newBoot reports whether join j is of a boot of the machine other than boot, the boot id
// of the machine's agent when a wait for its rejoin began (machineBoot): a join of that
// boot is the same agent connecting again (a link that dropped, a registry replica that
// restarted or died, a power action the BMC has not carried out yet), not the machine
// back from a reboot. A join or a wait that knows no boot id (an agent of an earlier
// version sends none; a join admitted by the JoinService has none) counts whatever its
// boot, as every join did before agents told their boot.
func newBoot(j store.AgentJoin, boot string) bool {
	return boot == "" || j.BootID != boot // a join of no boot id differs from any
}

// machineBoot is, as tx reads node's joins, the boot id of the machine's agent that
// joined last ("" when none did, or it told none): what a wait for the machine's next
// boot that begins now records (store.Attempt.BootID, store.Run.BootID) and WaitJoined
// compares the joins after it with.
func machineBoot(tx *store.Tx, node string) (string, error) {
	joins, err := tx.AgentJoins(node)
	if err != nil {
		return "", err
	}
	var last store.AgentJoin
	for _, r := range proto.MachineRoles {
		if j, ok := joins[string(r)]; ok && j.JoinedAt.After(last.JoinedAt) {
			last = j
		}
	}
	return last.BootID, nil
}

// WaitReturn returns node's agent of role's Presence once it holds a session again or
// the machine's other agent joined after it.
func (l *JoinLog) WaitReturn(ctx context.Context, node, role string) (p Presence, err error) {
	err = l.wait(ctx, func() (bool, error) {
		p, err = l.Presence(ctx, node, role)
		return p.Live || !p.Current, err
	})
	return p, err
}

// wait returns once done, checked again after every change of the joins, reports true
// or fails, or with ctx's error when ctx ends first.
func (l *JoinLog) wait(ctx context.Context, done func() (bool, error)) error {
	for {
		l.mu.Lock()
		changed := l.changed
		l.mu.Unlock()
		if ok, err := done(); ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// current is the last join of role among a node's joins (zero if role's agent never
// joined) and, when the machine's other agent joined after it, when that one joined: the
// join is current when other is zero.
func current(joins map[string]store.AgentJoin, role string) (j store.AgentJoin, other time.Time) {
	j, ok := joins[role]
	if !ok {
		return j, time.Time{}
	}
	for _, r := range proto.MachineRoles {
		if o, ok := joins[string(r)]; ok && string(r) != role && o.JoinedAt.After(j.JoinedAt) {
			return j, o.JoinedAt
		}
	}
	return j, time.Time{}
}

func (l *JoinLog) joins(node string) (joins map[string]store.AgentJoin, err error) {
	err = l.store.View(func(tx *store.Tx) error { joins, err = tx.AgentJoins(node); return err })
	return joins, err
}
