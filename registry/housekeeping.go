package registry

import (
	"context"
	"log/slog"
	"time"

	"github.com/better-compute/better-compute/registry/join"
	"github.com/better-compute/better-compute/registry/store"
)

// housekeepingInterval is how often the registry prunes what it keeps only for a while.
const housekeepingInterval = 24 * time.Hour

// startHousekeeping prunes the join tokens past their retention now, and again every
// housekeepingInterval until ctx ends; stop ends it and waits.
func startHousekeeping(ctx context.Context, st *store.Store, log *slog.Logger) (stop func()) {
	prune := func() {
		var n int
		err := st.Update(func(tx *store.Tx) (err error) { n, err = join.PruneTokens(tx); return err })
		if err != nil {
			log.Error("prune join tokens", "err", err)
		} else if n > 0 {
			log.Info("join tokens pruned", "count", n, "expiredMoreThan", join.Retention.String())
		}
	}
	prune()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(housekeepingInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				prune()
			}
		}
	}()
	return func() { cancel(); <-done }
}
