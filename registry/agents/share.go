package agents

import (
	"sync"

	"github.com/better-compute/better-compute/proto"
)

// shares shares one session's command streams among the tenants whose commands it
// carries (proto.Command.Tenant): a site agent runs at most proto.MaxAgentCommands at
// once for every tenant of its site, and one tenant's commands hold at most
// proto.TenantCommandShare of them. A tenant's further commands wait here, before
// their stream is opened, until one of its own gives its stream back; so a tenant whose
// BMCs never answer leaves the rest to the site's other tenants.
type shares struct {
	mu   sync.Mutex
	held map[string]int
	// freed is closed, and replaced, whenever a command gives its stream back.
	freed chan struct{}
}

// take counts a command of tenant on its way, once tenant holds fewer than its share;
// a command of no tenant (a machine's own agent's) is not counted. It is false when
// done is closed first.
func (sh *shares) take(done <-chan struct{}, tenant string) bool {
	if tenant == "" {
		return true
	}
	for {
		sh.mu.Lock()
		if sh.held == nil {
			sh.held, sh.freed = map[string]int{}, make(chan struct{})
		}
		if sh.held[tenant] < proto.TenantCommandShare {
			sh.held[tenant]++
			sh.mu.Unlock()
			return true
		}
		freed := sh.freed
		sh.mu.Unlock()
		select {
		case <-freed:
		case <-done:
			return false
		}
	}
}

// give counts the end of a command of tenant that take counted.
func (sh *shares) give(tenant string) {
	if tenant == "" {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.held[tenant]--; sh.held[tenant] == 0 {
		delete(sh.held, tenant)
	}
	close(sh.freed)
	sh.freed = make(chan struct{})
}
