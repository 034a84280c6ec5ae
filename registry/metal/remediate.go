package metal

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// The shipped remediation profiles: the only ones metal.remediate runs.
const (
	ProfileRemediateReboot   = "remediate-reboot"
	ProfileRemediateGPUReset = "remediate-gpu-reset"
)

// remediationProfiles are the profiles metal.remediate takes.
var remediationProfiles = []string{ProfileRemediateReboot, ProfileRemediateGPUReset}

// Bounds and default of a pool's policy.remediation.
const (
	minAgentGoneAfter = time.Minute
	minBackoff        = time.Minute
	defaultBackoff    = time.Hour
	// remediationShare: the policy has at most one in this many of a pool's nodes in a
	// remediation at a time, and at least one node: a fault that takes every agent of a
	// pool away at once (its network, the registry's agent endpoint) reboots a few
	// machines, not the pool.
	remediationShare = 10
	// maxAutomaticStreak is how many automatic remediations in a row the policy runs on a
	// node before it leaves the node to its operator: a fault that returns after each
	// reboot (an agent that crashes once started) is not rebooted for ever.
	maxAutomaticStreak = 3
	// streakWindow: an automatic remediation continues the streak of the one before it
	// when it begins within this time of it, the longest backoff.
	streakWindow = 24 * time.Hour
)

// Presence tells whether a machine's installed OS agent (bcd node) has a session now,
// with this registry or, as tx reads the store, with another replica.
type Presence interface {
	NodeAgentConnected(tx *store.Tx, node string) bool
}

// Remediate starts a remediation profile (remediate-reboot or remediate-gpu-reset, the
// latest shipped version when version is 0; another is INVALID_INPUT at profileVersion) on one of tenant's nodes in tx, as the
// lifecycle table allows (from active), and records on the node why: reason, or that an
// operator asked when it is "". Start the returned run once tx has committed. Another
// tenant's node is NOT_FOUND; any other profile is INVALID_INPUT at profile; a pool
// without agent, whose machines never rejoin, is UNSUPPORTED.
func (s *Service) Remediate(tx *store.Tx, tenant, nodeID, profileID string, version int, reason string) (store.Run, store.Node, error) {
	return s.remediate(tx, tenant, nodeID, profileID, version, reason, false)
}

func (s *Service) remediate(tx *store.Tx, tenant, nodeID, profileID string, version int, reason string, automatic bool) (store.Run, store.Node, error) {
	node, err := tx.Node(nodeID)
	if err != nil || node.Tenant != tenant {
		return store.Run{}, node, proto.Errorf(proto.NotFound, "node %q not found: `nodes list` shows the tenant's nodes", nodeID).WithPath(nodeField)
	}
	if !slices.Contains(remediationProfiles, profileID) {
		return store.Run{}, node, proto.Errorf(proto.InvalidInput, "%s is not a remediation profile: use one of %s", proto.Quote(profileID), strings.Join(remediationProfiles, ", ")).WithPath("profile")
	}
	rec, ok := remediationRecord(profileID, version)
	if !ok {
		return store.Run{}, node, proto.Errorf(proto.InvalidInput, "%s ships no version %d: leave the version out for the latest", profileID, version).WithPath("profileVersion")
	}
	if reason, err = proto.OperatorReason(reason); err != nil {
		return store.Run{}, node, err
	}
	pool, err := tx.Pool(node.Tenant, node.Pool)
	if err != nil {
		return store.Run{}, node, err
	}
	if pool.Policy.Agent == store.AgentNone && node.State == store.NodeActive {
		return store.Run{}, node, proto.Errorf(proto.Unsupported, "pool %s runs no agent (agent: none): its machines never rejoin, which remediation waits for", pool.Name)
	}
	streak := 0
	if automatic {
		streak = automaticStreak(node, tx.Now()) + 1
	}
	run, node, err := s.Act(tx, tenant, nodeID, Remediate, Options{Profile: &rec})
	if err != nil {
		return run, node, err
	}
	node, err = updateNode(tx, node.ID, func(n *store.Node) error {
		n.Remediation = &store.Remediation{Profile: run.Profile, Workflow: run.ID, Reason: reason, Automatic: automatic, Streak: streak, At: tx.Now()}
		return nil
	})
	return run, node, err
}

// automaticStreak is the streak of automatic remediations n's next one would continue at
// now: its last remediation's, when that was automatic, is the last workflow that ran on
// n (no release, deploy or retry since) and began within streakWindow; 0 otherwise.
func automaticStreak(n store.Node, now time.Time) int {
	r := n.Remediation
	if r == nil || !r.Automatic || r.Workflow != n.Workflow || now.Sub(r.At) >= streakWindow {
		return 0
	}
	return r.Streak
}

// givenUp says whether the policy has stopped remediating n: its last
// maxAutomaticStreak remediations were automatic and in a row, and nothing ran on it
// since. An operator's request (a remediation by hand, a retry, a release) ends it.
func givenUp(n store.Node) bool {
	r := n.Remediation
	return r != nil && r.Automatic && r.Workflow == n.Workflow && r.Streak >= maxAutomaticStreak
}

// revokedUnjoined says whether an operator revoked the certificates of n's agents and its
// installed OS's agent has not joined since: the machine may be compromised, and is
// left as it is for the operator to look at (a restart would lose what its memory holds),
// while a remediation, awaiting an agent whose certificate is refused, could only fail.
func revokedUnjoined(tx *store.Tx, n store.Node) (bool, error) {
	r := n.AgentsRevoked
	if r == nil {
		return false, nil
	}
	joins, err := tx.AgentJoins(n.ID)
	j, ok := joins[string(proto.RoleNode)]
	return err == nil && (!ok || !j.JoinedAt.After(r.At)), err
}

// remediationRecord is the shipped remediation profile id at version (the latest when
// 0).
func remediationRecord(id string, version int) (store.ProfileRecord, bool) {
	var rec store.ProfileRecord
	for _, p := range profile.Shipped() {
		if p.ID() == id && (p.Version() == version || version == 0 && p.Version() > rec.Version) {
			rec = store.ProfileRecord{Tenant: profile.ShippedTenant, ID: p.ID(), Version: p.Version(), Document: p.Document()}
		}
	}
	return rec, rec.ID != ""
}

// checkRemediationPolicy checks a pool's policy.remediation: durations as profiles write
// them, agentGoneAfter and backoff at least a minute.
func checkRemediationPolicy(r *store.RemediationPolicy) error {
	if r == nil {
		return nil
	}
	for _, f := range []struct {
		field, value string
		least        time.Duration
	}{{"agentGoneAfter", r.AgentGoneAfter, minAgentGoneAfter}, {"backoff", r.Backoff, minBackoff}} {
		if f.value == "" {
			continue
		}
		d, err := profile.ParseDuration(f.value)
		if err == nil && d < f.least {
			err = fmt.Errorf("%s is less than %s", f.value, f.least)
		}
		if err != nil {
			return proto.Errorf(proto.InvalidInput, "policy.remediation.%s: %v", f.field, err).WithPath("policy.remediation." + f.field)
		}
	}
	return nil
}

// remediationRules are a checked policy.remediation's durations.
func remediationRules(r *store.RemediationPolicy) (gone, backoff time.Duration) {
	backoff = defaultBackoff
	if r == nil || r.AgentGoneAfter == "" {
		return 0, backoff
	}
	gone, _ = profile.ParseDuration(r.AgentGoneAfter)
	if r.Backoff != "" {
		backoff, _ = profile.ParseDuration(r.Backoff)
	}
	return gone, backoff
}

// absences remembers since when each active node's installed OS agent has been seen
// without a session, by the checks of RemediateAgentsGone. It is memory only: after a
// registry restart every absence is counted again from the first check.
type absences struct {
	mu    sync.Mutex
	since map[string]time.Time
}

// RemediateAgentsGone is the automatic health remediation, run by the registry's
// housekeeping every minute or so: on every pool with policy.remediation.agentGoneAfter,
// an active node whose installed OS agent has had no session at each check for at least
// that long, whose last remediation is older than the backoff, whose agents an operator
// has not revoked (revokedUnjoined), and that the policy has not given up on (givenUp),
// gets remediate-reboot with the reason recorded on the node, while fewer of its pool's
// nodes than remediationLimit are in a remediation (counted again in the transaction
// that starts it, which another replica's check may race); the others wait for a later
// check. It returns the runs it started. Without a Presence it does nothing.
func (s *Service) RemediateAgentsGone() ([]store.Run, error) {
	if s.cfg.Presence == nil {
		return nil, nil
	}
	due, err := s.agentsGone()
	if err != nil {
		return nil, err
	}
	var started []store.Run
	held := map[string]bool{}
	for _, d := range due {
		if held[d.tenant+"\x00"+d.pool] {
			continue
		}
		var run store.Run
		var busy, streak int
		err := s.cfg.Store.Update(func(tx *store.Tx) error {
			n, err := tx.Node(d.node)
			if err != nil || n.State != store.NodeActive || givenUp(n) || n.Remediation != nil && tx.Now().Sub(n.Remediation.At) < d.backoff {
				return err
			}
			if revoked, err := revokedUnjoined(tx, n); err != nil || revoked {
				return err
			}
			pool, err := tx.Pool(n.Tenant, n.Pool)
			if err != nil {
				return err
			}
			if busy, err = poolInRemediation(tx, pool); err != nil || busy >= d.limit {
				return err
			}
			var rn store.Node
			run, rn, err = s.remediate(tx, n.Tenant, n.ID, ProfileRemediateReboot, 0, d.reason, true)
			if rn.Remediation != nil {
				streak = rn.Remediation.Streak
			}
			return err
		})
		if err == nil && run.ID == "" && busy >= d.limit {
			held[d.tenant+"\x00"+d.pool] = true
			s.cfg.Log.Warn("automatic remediation held: the pool has as many nodes in a remediation as it may", "tenant", d.tenant, "pool", d.pool, "inRemediation", busy, "limit", d.limit)
			continue
		}
		if err != nil {
			s.cfg.Log.Error("automatic remediation", "node", d.node, "err", err)
			continue
		}
		if run.ID != "" {
			s.cfg.Log.Warn("remediating a node", "node", d.node, "workflow", run.ID, "profile", ProfileRemediateReboot, "reason", d.reason)
			if streak == maxAutomaticStreak {
				s.cfg.Log.Warn("the node's last automatic remediation in a row: the pool's policy remediates it no more until an operator acts on it", "node", d.node, "workflow", run.ID, "streak", streak)
			}
			s.Start(run)
			started = append(started, run)
		}
	}
	return started, nil
}

// goneNode is an active node whose agent has been gone for its pool's agentGoneAfter.
type goneNode struct {
	node, tenant, pool, reason string
	backoff                    time.Duration
	// limit is how many of the pool's nodes may be in a remediation at once.
	limit int
}

// remediationLimit is how many nodes of a pool of size nodes (active or in a
// remediation) the policy may have in a remediation at once: a remediationShare of
// them, at least one.
func remediationLimit(size int) int { return max(1, size/remediationShare) }

// inRemediation says whether n is in a remediation: one runs, by hand or by the policy,
// or one of the policy's failed and no operator has acted on the node since (retry,
// release, retire). One an operator ran by hand that failed is the operator's to look
// at already, and holds none of the policy's places.
func inRemediation(n store.Node) bool {
	failedAutomatic := n.State == store.NodeFailed && n.FailedFrom == store.NodeRemediating && n.Remediation != nil && n.Remediation.Automatic
	return n.State == store.NodeRemediating || failedAutomatic
}

// poolInRemediation counts pool's nodes in a remediation.
func poolInRemediation(tx *store.Tx, pool store.Pool) (int, error) {
	count := 0
	err := eachPage(func(pg store.Page) ([]store.Node, string, error) {
		return tx.Nodes(pool.Tenant, pool.Name, "", pg)
	}, func(n store.Node) error {
		if inRemediation(n) {
			count++
		}
		return nil
	})
	return count, err
}

// agentsGone reads, without writing, the active nodes of the pools with
// policy.remediation.agentGoneAfter, records which agents it finds gone since when, and
// returns the nodes due for a remediation: gone long enough, none running, the last
// remediation older than the backoff, their agents not revoked since their installed OS
// last joined, each with its pool's remediationLimit.
func (s *Service) agentsGone() ([]goneNode, error) {
	var due []goneNode
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		now := tx.Now()
		s.absent.mu.Lock()
		defer s.absent.mu.Unlock()
		if s.absent.since == nil {
			s.absent.since = map[string]time.Time{}
		}
		seen := map[string]bool{}
		err := eachPool(tx, func(pool store.Pool) error {
			gone, backoff := remediationRules(pool.Policy.Remediation)
			if gone == 0 || pool.Policy.Agent == store.AgentNone {
				return nil
			}
			var poolDue []goneNode
			size := 0
			err := eachPage(func(pg store.Page) ([]store.Node, string, error) {
				return tx.Nodes(pool.Tenant, pool.Name, "", pg)
			}, func(n store.Node) error {
				if inRemediation(n) {
					size++
				}
				if n.State != store.NodeActive {
					return nil
				}
				size++
				seen[n.ID] = true
				if s.cfg.Presence.NodeAgentConnected(tx, n.ID) {
					delete(s.absent.since, n.ID)
					return nil
				}
				since, ok := s.absent.since[n.ID]
				if !ok {
					s.absent.since[n.ID] = now
					return nil
				}
				if now.Sub(since) < gone || givenUp(n) || n.Remediation != nil && now.Sub(n.Remediation.At) < backoff {
					return nil
				}
				if running, err := workflowRunning(tx, n); err != nil || running {
					return err
				}
				if revoked, err := revokedUnjoined(tx, n); err != nil || revoked {
					return err
				}
				poolDue = append(poolDue, goneNode{node: n.ID, tenant: pool.Tenant, pool: pool.Name, backoff: backoff, reason: fmt.Sprintf("agent-gone: the node agent has had no session since %s (policy.remediation.agentGoneAfter %s)",
					since.UTC().Format(time.RFC3339), pool.Policy.Remediation.AgentGoneAfter)})
				return nil
			})
			for _, d := range poolDue {
				d.limit = remediationLimit(size)
				due = append(due, d)
			}
			return err
		})
		for id := range s.absent.since {
			if !seen[id] {
				delete(s.absent.since, id)
			}
		}
		return err
	})
	return due, err
}

// eachPool calls fn with every pool of every site.
func eachPool(tx *store.Tx, fn func(store.Pool) error) error {
	return eachPage(tx.Sites, func(site store.Site) error {
		pools, err := tx.PoolsAtSite(site.ID)
		for _, p := range pools {
			if err != nil {
				break
			}
			err = fn(p)
		}
		return err
	})
}

// eachPage calls fn with every item of every page list returns.
func eachPage[T any](list func(store.Page) ([]T, string, error), fn func(T) error) error {
	for pg := (store.Page{}); ; {
		items, next, err := list(pg)
		if err != nil {
			return err
		}
		for _, it := range items {
			if err := fn(it); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		pg.Cursor = next
	}
}
