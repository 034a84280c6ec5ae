package store

import (
	"sync"
	"time"
)

// etcdGather is how long a group commit, or a barrier round, waits at most for the calls
// the one before it released: a commit or a barrier costs the members its round of the
// cluster, not its calls, so a larger round costs them less a call (docs/store.md,
// "Group commit" and "The mirror").
const etcdGather = 12 * time.Millisecond

// gather is the wait of a run of rounds (group commits, barriers) under load: after a
// round of several calls, the next round waits until as many calls wait for it as
// waited when that round ended and as it served, so that the callers it released can
// come back and join it, instead of arriving while it is under way and taking turns
// with it in smaller rounds. It waits max at most, for callers that do not come back,
// and ends at once when they are all there or the store closes. Its owner's lock guards
// want; only the owner's running goroutine waits.
type gather struct {
	max time.Duration
	// behind is how many calls waited when the round under way first told its callers
	// (-1: not yet): the callers that came back after that are not counted in it.
	behind int
	// want is how many waiting calls end the wait under way (0: none under way); full
	// is told once they wait.
	want  int
	full  chan struct{}
	timer *time.Timer
}

func newGather() gather {
	t := time.NewTimer(etcdGather)
	t.Stop()
	return gather{max: etcdGather, behind: -1, full: make(chan struct{}, 1), timer: t}
}

// releasing notes, before the round under way first tells a caller its outcome, that
// waiting calls wait behind it: the next round waits for those and for the callers this
// one releases, so a released caller back before that wait starts does not count twice.
// Called with the owner's lock held.
func (g *gather) releasing(waiting int) {
	if g.behind < 0 {
		g.behind = waiting
	}
}

// arrived tells the wait under way, if any, that waiting calls now wait. Called with the
// owner's lock held.
func (g *gather) arrived(waiting int) {
	if g.want > 0 && waiting >= g.want {
		g.want = 0
		select {
		case g.full <- struct{}{}:
		default: // told already (never: wait drains it before it sets want)
		}
	}
}

// wait waits, after a round that served served calls, until as many calls wait as
// waited behind it (releasing) and as it served, max at most, or until closed is done;
// then the next round starts. Called with mu, the owner's lock, held: it gives mu up
// while it waits and holds it again when it returns.
func (g *gather) wait(mu *sync.Mutex, served int, closed <-chan struct{}) {
	behind := g.behind
	g.behind = -1
	if served <= 1 {
		return
	}
	g.want = behind + served
	mu.Unlock()
	g.timer.Reset(g.max)
	select {
	case <-g.full:
		g.timer.Stop()
	case <-g.timer.C:
	case <-closed:
		g.timer.Stop()
	}
	mu.Lock()
	if g.want == 0 && len(g.full) > 0 {
		<-g.full // told as the wait ended otherwise
	}
	g.want = 0
}
