package registry

import (
	"context"
	"log/slog"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// leaseTTL is how long a replica's lease holds unrenewed (store.ReplicaLease): how long
// the agent sessions of a registry that died still count as open at the other replicas.
// It is the workflows' claim lifetime: a dead registry's sessions and runs are let go
// together.
const leaseTTL = workflow.DefaultClaimTTL

// takeLease takes the lease of this run of the registry, replacing an earlier run's: the
// sessions that run recorded are no longer open.
func takeLease(st *store.Store, holder store.Holder) error {
	return st.Update(func(tx *store.Tx) error { return tx.TakeLease(holder, leaseTTL) })
}

// keepLease renews holder's lease now and every third of its lifetime on clk until ctx
// ends; stop ends it and waits. A renewal never takes the lease back from a later run
// of this replica (store.Tx.RenewLease): that run holds the agents' sessions.
func keepLease(ctx context.Context, clk clock.Clock, st *store.Store, holder store.Holder, log *slog.Logger) (stop func()) {
	return every(ctx, clk, leaseTTL/3, func() {
		if err := st.Update(func(tx *store.Tx) error { return tx.RenewLease(holder, leaseTTL) }); err != nil {
			log.Error("renewing this registry's lease: the other replicas count its agents' sessions as open only while it holds", "err", err)
		}
	})
}

// releaseLease drops holder's lease once its sessions have ended (the agents were told
// to come back): the other replicas stop counting them at once.
func releaseLease(st *store.Store, holder store.Holder) error {
	return st.Update(func(tx *store.Tx) error { return tx.ReleaseLease(holder) })
}
