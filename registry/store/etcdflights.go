package store

import (
	"context"
	"strconv"
	"strings"
	"sync"
)

// A commit whose answer is lost (the member answering died, the request timed out) may
// have been applied all the same: its caller is told UNAVAILABLE, and the commit hooks,
// which a commit of this replica runs on its caller once etcd confirmed it, never run.
// The watch sees the commit, as it sees every commit, but tells the hooks only other
// replicas' commits. So each commit of a replica is numbered, in the commit key's value
// (its replica's id, a dot, the number), and is in flight until its answer comes: a
// commit of this replica the watch sees whose answer was lost is told to the hooks as
// another replica's is (a NodeSpec pushed to the agent whose session is here, a waiter
// woken), in its place among the commits the watch tells (docs/store.md, "Commit hooks
// across replicas").

// flightsLost is how many commits whose answer was lost a replica remembers, should the
// watch see them later: the oldest is forgotten past it (one that was never applied is
// never seen).
const flightsLost = 1024

// flight is one commit of this replica, from its request until its answer.
type flight struct {
	// done is closed when the answer came or was lost; lost is set before.
	done chan struct{}
	lost bool
}

// answerLost waits for f's answer and reports whether it was lost: the commit's hooks
// did not run on its caller. False when ctx ends first.
func (f *flight) answerLost(ctx context.Context) bool {
	select {
	case <-f.done:
		return f.lost
	case <-ctx.Done():
		return false
	}
}

// flights are this replica's commits in flight, and those whose answer was lost.
type flights struct {
	mu   sync.Mutex
	next uint64
	open map[uint64]*flight
	// lost are the numbers of the commits whose answer was lost, oldest first.
	lost []uint64
}

// start numbers a commit about to be sent and marks it in flight.
func (fs *flights) start() uint64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.open == nil {
		fs.open = map[uint64]*flight{}
	}
	fs.next++
	fs.open[fs.next] = &flight{done: make(chan struct{})}
	return fs.next
}

// end notes commit n's answer: lost, or come (the commit was made or refused, and a
// commit made ran its hooks on its caller).
func (fs *flights) end(n uint64, lost bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.open[n]
	f.lost = lost
	close(f.done)
	if !lost {
		delete(fs.open, n)
		return
	}
	fs.lost = append(fs.lost, n)
	if len(fs.lost) > flightsLost {
		delete(fs.open, fs.lost[0])
		fs.lost = fs.lost[1:]
	}
}

// seen is commit n, of this replica, as the watch sees it applied: nil when its answer
// came (its hooks ran on its caller), else its flight, which the hooks wait on. A commit
// is applied once, so a lost one seen is forgotten.
func (fs *flights) seen(n uint64) *flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.open[n]
	if f != nil && f.lost {
		delete(fs.open, n)
	}
	return f
}

// commitValue is the commit key's value of this replica's commit n.
func (b *etcdBackend) commitValue(n uint64) string {
	return string(b.id) + "." + strconv.FormatUint(n, 10)
}

// ownCommit reads a commit key's value: the number of this replica's commit, ok false
// when another replica wrote it.
func (b *etcdBackend) ownCommit(value []byte) (n uint64, ok bool) {
	id, num, found := strings.Cut(string(value), ".")
	if !found || id != string(b.id) {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	return n, err == nil
}
