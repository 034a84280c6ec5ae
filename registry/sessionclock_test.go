package registry

import (
	"context"
	"sync"
	"testing"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
)

// TestASessionOpensOnTheRegistrysClock: a registry whose clock is 60 days behind the
// real time (as the tests that let days pass run it) dates its site agent's session by
// that clock, as it dates everything else it records: `sites list` shows the session
// opened (since) between the registry's moments before and after the agent connected,
// and no later than the agent was last seen. Before, the endpoint stamped the opening
// with the real time, 60 days after the hello it was last seen at, while the session's
// end and every other record went by the registry's clock.
func TestASessionOpensOnTheRegistrysClock(t *testing.T) {
	clk := newShiftedClock(-busyPast)
	f := serveBusy(t, Config{Clock: clk})
	f.populate()
	ctx, cancel := context.WithCancel(context.Background())
	var agents sync.WaitGroup
	defer func() { cancel(); agents.Wait() }()
	before := clk.Now()
	siteAgent := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	agents.Go(func() { siteAgent.run(ctx, siteAgent.start()) })
	var agent *api.SiteAgent
	f.wait("the site agent connects", func() bool {
		sites, err := call[api.SiteList](f.admin, "sites.list", api.ListRequest{})
		if !f.must(err, "sites.list") || len(sites.Sites) != 1 {
			return false
		}
		agent = sites.Sites[0].Agent
		return agent != nil && agent.Connected
	})
	after := clk.Now()
	if agent == nil || agent.Since.Before(before) || agent.Since.After(after) || agent.Since.After(agent.LastSeen) {
		t.Fatalf("the site agent's session: %+v; want it opened between %s and %s by the registry's clock, and not after it was last seen", agent, before, after)
	}
}
