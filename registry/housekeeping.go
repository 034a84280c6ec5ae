package registry

import (
	"context"
	"log/slog"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/join"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
)

// housekeepingInterval is how often the registry prunes what it keeps only for a while.
const housekeepingInterval = 24 * time.Hour

// startHousekeeping prunes the join tokens, the events, the finished workflow runs, the
// deleted profile versions no run or node refers to any more, the revoked or expired
// credentials, the expired replica leases and the agent return plans
// of replicas gone past their retention,
// and forgets the relayed commands, pending or answered, older
// than agents.CommandTTL, now and again every housekeepingInterval on clk until ctx
// ends; stop ends it and waits.
func startHousekeeping(ctx context.Context, clk clock.Clock, st *store.Store, log *slog.Logger) (stop func()) {
	// logged logs what one prune did: its error, or how many records it deleted (with
	// the retention, in attrs), when any.
	logged := func(failed, done string, n int, err error, attrs ...any) {
		if err != nil {
			log.Error(failed, "err", err)
		} else if n > 0 {
			log.Info(done, append([]any{"count", n}, attrs...)...)
		}
	}
	prune := func() {
		n, err := st.PruneOnward(join.PruneTokens)
		logged("prune join tokens", "join tokens pruned", n, err, "expiredMoreThan", join.Retention.String())
		n, err = st.PruneOnward((*store.Tx).PruneEvents)
		logged("prune events", "events pruned", n, err, "olderThan", store.EventMaxAge.String())
		if err := indexEndedRuns(st); err != nil {
			log.Error("index the workflow runs ended before their index", "err", err)
		}
		n, err = st.Prune(func(tx *store.Tx) (int, error) { return tx.PruneRuns(tx.Now().Add(-store.RunRetention)) })
		logged("prune workflow runs", "finished workflow runs past their retention pruned, or kept while their node names them", n, err,
			"endedMoreThan", store.RunRetention.String())
		n, err = st.PruneOnward((*store.Tx).PruneDeletedProfiles)
		logged("prune deleted profile versions", "deleted profile versions no run or node refers to pruned", n, err)
		n, err = st.PruneOnward((*store.Tx).PruneCredentials)
		logged("prune credentials", "revoked or expired credentials pruned", n, err, "endedMoreThan", store.CredentialRetention.String())
		n, err = st.PruneOnward((*store.Tx).PruneReplicaLeases)
		logged("prune replica leases", "leases of replicas gone pruned", n, err, "expiredMoreThan", store.LeaseRetention.String())
		n, err = st.PruneOnward((*store.Tx).PruneAgentReturns)
		logged("prune agent return plans", "agent return plans of replicas gone pruned", n, err, "streamEndedMoreThan", store.AgentReturnRetention.String())
		n, err = st.Prune(func(tx *store.Tx) (int, error) { return tx.ExpireAgentCommands(clk.Now().Add(-agents.CommandTTL)) })
		logged("expire agent commands", "agent commands forgotten", n, err, "olderThan", agents.CommandTTL.String())
	}
	return every(ctx, clk, housekeepingInterval, prune)
}

// indexEndedRuns gives the runs that ended under an earlier release their entry in the
// index PruneRuns reads (store.Tx.IndexEndedRuns), a transaction a chunk, until every run
// was walked: once, on the first pass after an upgrade; nothing after that.
func indexEndedRuns(st *store.Store) error {
	for done := false; !done; {
		if err := st.Update(func(tx *store.Tx) (err error) { done, err = tx.IndexEndedRuns(); return err }); err != nil {
			return err
		}
	}
	return nil
}

// remediationInterval is how often the registry looks for nodes its pools' policy
// remediates: an agent gone counts from the first check that finds it gone, so it is
// also how late a remediation may come.
const remediationInterval = time.Minute

// startRemediation runs metal's automatic health remediation (the pools'
// policy.remediation) every remediationInterval on clk until ctx ends; stop ends it and
// waits.
func startRemediation(ctx context.Context, clk clock.Clock, svc *metal.Service, log *slog.Logger) (stop func()) {
	return every(ctx, clk, remediationInterval, func() {
		if _, err := svc.RemediateAgentsGone(); err != nil {
			log.Error("automatic remediation", "err", err)
		}
	})
}

// every calls fn at once and then each interval on clk, in a goroutine of its own,
// until ctx ends; stop ends it and waits for a call in progress.
func every(ctx context.Context, clk clock.Clock, interval time.Duration, fn func()) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fn()
			t := clk.NewTimer(interval)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
	}()
	return func() { cancel(); <-done }
}
