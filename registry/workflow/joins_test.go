package workflow

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/google/go-cmp/cmp"
)

func TestJoinLog(t *testing.T) {
	fake := clock.NewFake(epoch)
	st := storetest.Open(t, store.Options{Now: fake.Now})
	log := NewJoinLog(st, store.Holder{})
	join := func(role string) {
		fake.Advance(time.Minute)
		if err := log.Joined("nd_1", role, ""); err != nil {
			t.Fatal(err)
		}
	}
	// waited reports whether WaitJoined returns within a moment.
	waited := func(role string, since time.Time) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		return log.WaitJoined(ctx, "nd_1", role, since, "") == nil
	}
	connected := func() []bool {
		var out []bool
		for _, role := range []string{"ramdisk", "node"} {
			p, err := log.Presence(context.Background(), "nd_1", role)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p.Current && p.Live)
		}
		return out
	}

	if diff := cmp.Diff([]bool{false, false}, connected()); diff != "" {
		t.Errorf("before any join (-want +got):\n%s", diff)
	}
	join("ramdisk")
	ramdiskAt := fake.Now()
	if !waited("ramdisk", ramdiskAt) || !waited("", ramdiskAt) || waited("node", epoch) || waited("ramdisk", ramdiskAt.Add(time.Second)) {
		t.Error("a ramdisk join: satisfies ramdisk and any role since it, not node nor a later since")
	}
	if diff := cmp.Diff([]bool{true, false}, connected()); diff != "" {
		t.Errorf("after the ramdisk joined (-want +got):\n%s", diff)
	}
	join("node")
	if diff := cmp.Diff([]bool{false, true}, connected()); diff != "" {
		t.Errorf("after the installed OS joined (-want +got):\n%s", diff)
	}

	// A waiter is woken by a join that comes later.
	since := fake.Now().Add(time.Second)
	done := make(chan error, 1)
	go func() { done <- log.WaitJoined(context.Background(), "nd_1", "node", since, "") }()
	select {
	case err := <-done:
		t.Fatalf("returned before the join: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	join("node")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestConnectedElsewhere: two registries' join logs on one store, as two replicas: the
// node agent whose session one recorded is connected for the other, not for itself
// (its own sessions it knows); once the session ends there it is not; an end older than
// a newer join (the agent came back at once) leaves the newer join alone, as does the
// end another replica saw of its own session; a ramdisk join after it means the
// machine left its installed OS. A session of a replica whose lease lapsed (it died), or
// of an earlier run of a replica that restarted, is not connected anywhere.
func TestConnectedElsewhere(t *testing.T) {
	fake := clock.NewFake(epoch)
	st := storetest.Open(t, store.Options{Now: fake.Now})
	holderA, holderB := store.Holder{Replica: "rg_a", Started: epoch}, store.Holder{Replica: "rg_b", Started: epoch}
	lease := func(h store.Holder) error {
		return st.Update(func(tx *store.Tx) error { return tx.TakeLease(h, 10*time.Second) })
	}
	for _, h := range []store.Holder{holderA, holderB} {
		if err := lease(h); err != nil {
			t.Fatal(err)
		}
	}
	a, b := NewJoinLog(st, holderA), NewJoinLog(st, holderB)
	elsewhere := func(l *JoinLog) (replica string) {
		if err := st.View(func(tx *store.Tx) (err error) { replica, err = l.ConnectedElsewhere(tx, "nd_1", "node"); return err }); err != nil {
			t.Fatal(err)
		}
		return replica
	}
	// step checks the replica each registry finds the session at ("" for none).
	step := func(what string, err error, wantA, wantB string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if gotA, gotB := elsewhere(a), elsewhere(b); gotA != wantA || gotB != wantB {
			t.Errorf("%s: connected elsewhere for rg_a %q, for rg_b %q; want %q, %q", what, gotA, gotB, wantA, wantB)
		}
	}
	step("no join", nil, "", "")
	ended := fake.Now()
	fake.Advance(time.Second)
	step("a session at rg_a", a.Joined("nd_1", "node", ""), "", "rg_a")
	step("an end at rg_a older than the join", a.Left("nd_1", "node", ended), "", "rg_a")
	step("an end at rg_b of a session it does not hold", b.Left("nd_1", "node", fake.Now()), "", "rg_a")
	fake.Advance(time.Second)
	step("the session at rg_a ended", a.Left("nd_1", "node", fake.Now()), "", "")
	fake.Advance(time.Second)
	step("a session at rg_b", b.Joined("nd_1", "node", ""), "rg_b", "")
	fake.Advance(time.Second)
	step("the machine's ramdisk joined since", b.Joined("nd_1", "ramdisk", ""), "", "")
	fake.Advance(time.Second)
	step("rg_b renewed its lease", lease(holderB), "", "")
	step("a session at rg_b again", b.Joined("nd_1", "node", ""), "rg_b", "")
	fake.Advance(9 * time.Second)
	step("rg_b's lease not renewed for 9 s of 10", nil, "rg_b", "")
	fake.Advance(time.Second)
	step("rg_b's lease lapsed: it died holding the session", nil, "", "")
	step("rg_b renewed its lease late", lease(holderB), "rg_b", "")
	restarted := store.Holder{Replica: "rg_b", Started: fake.Now()}
	step("rg_b restarted: its new run took the lease", lease(restarted), "", "")
}

// TestWaitJoinedWakesAtAnotherReplicasJoin: a driver waiting for a rejoin on one replica
// wakes when the agent's join is recorded by another replica of the same etcd store.
func TestWaitJoinedWakesAtAnotherReplicasJoin(t *testing.T) {
	cluster := etcdtest.Start(t)
	cfg := store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: "joins"}
	var logs [2]*JoinLog
	for i := range logs {
		st, err := store.OpenEtcd(cfg, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		logs[i] = NewJoinLog(st, store.Holder{Replica: fmt.Sprintf("rg_%d", i), Started: time.Now()})
	}
	since := time.Now()
	done := make(chan error, 1)
	go func() { done <- logs[0].WaitJoined(t.Context(), "nd_1", "node", since, "") }()
	select {
	case err := <-done:
		t.Fatalf("returned %v before any join", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := logs[1].Joined("nd_1", "node", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the driver's replica still waits after the other replica recorded the join")
	}
}

// TestPresence, on each store backend: the ramdisk's session is live while this run of
// the registry holds it or another replica whose lease holds does, and a join admitted
// is not a session (until the agent opens one); once ended, it tells
// when: the end recorded, or, when the registry run that held it stopped or died without
// recording it, the latest time that run is known to have run (its lease's expiry, the
// start of the replica's next run) or this run's start. A registry's restart alone
// records no end; a stop that asked its agents back later than that counts the end from
// that moment and the re-slot spread of a return refused (ReturnBy). WaitReturn returns at the ramdisk's rejoin, and when the installed OS
// joins after it (the ramdisk is no longer current, says when the OS joined, and still
// tells of its own last session).
func TestPresence(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			fake := clock.NewFake(epoch)
			st := b.Open(t, store.Options{Now: fake.Now})
			lease := func(h store.Holder) {
				t.Helper()
				if err := st.Update(func(tx *store.Tx) error { return tx.TakeLease(h, 10*time.Second) }); err != nil {
					t.Fatal(err)
				}
			}
			holderA, holderB := store.Holder{Replica: "rg_a", Started: epoch}, store.Holder{Replica: "rg_b", Started: epoch}
			lease(holderA)
			lease(holderB)
			a, b := NewJoinLog(st, holderA), NewJoinLog(st, holderB)
			check := func(what string, l *JoinLog, want Presence) {
				t.Helper()
				got, err := l.Presence(t.Context(), "nd_1", "ramdisk")
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", what, diff)
				}
			}
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}

			check("no join", a, Presence{})
			// A join admitted holds no session until the agent opens one.
			fake.Advance(time.Second)
			admitted := fake.Now()
			must(a.Admitted("nd_1", "ramdisk"))
			check("a join admitted at rg_a", a, Presence{Current: true, JoinedAt: admitted, EndedAt: admitted})
			fake.Advance(time.Second)
			joined := fake.Now()
			must(a.Joined("nd_1", "ramdisk", ""))
			live := Presence{Current: true, JoinedAt: joined, Live: true}
			check("a session at rg_a, at rg_a", a, live)
			check("a session at rg_a, at rg_b", b, live)
			fake.Advance(time.Second)
			ended := fake.Now()
			must(a.Left("nd_1", "ramdisk", ended))
			gone := Presence{Current: true, JoinedAt: joined, EndedAt: ended, Recorded: true}
			check("the session ended at rg_a, at rg_a", a, gone)
			check("the session ended at rg_a, at rg_b", b, gone)

			// The ramdisk comes back at rg_b; rg_b dies: its lease lapses unrenewed.
			fake.Advance(time.Second)
			rejoined := fake.Now()
			back := Presence{Current: true, JoinedAt: rejoined, Live: true}
			returned := waitReturn(t, a)
			must(b.Joined("nd_1", "ramdisk", ""))
			returned(back)
			check("a session at rg_b, at rg_a", a, back)
			fake.Advance(10 * time.Second)
			check("rg_b's lease lapsed, at rg_a", a, Presence{Current: true, JoinedAt: rejoined, EndedAt: epoch.Add(10 * time.Second)})

			// rg_b restarts: the join of its earlier run ended by this run's start at the latest.
			restarted := store.Holder{Replica: "rg_b", Started: fake.Now()}
			lease(restarted)
			b = NewJoinLog(st, restarted)
			check("rg_b restarted, at rg_b", b, Presence{Current: true, JoinedAt: rejoined, EndedAt: restarted.Started})
			fake.Advance(time.Minute)
			check("rg_b restarted a minute ago, at rg_a", a, Presence{Current: true, JoinedAt: rejoined, EndedAt: restarted.Started})

			// A stop releases the lease: the end is then known only to follow the join,
			// and this run's start.
			must(st.Update(func(tx *store.Tx) error { return tx.ReleaseLease(restarted) }))
			check("rg_b stopped, at rg_a", a, Presence{Current: true, JoinedAt: rejoined, EndedAt: rejoined})
			again := store.Holder{Replica: "rg_b", Started: fake.Now()}
			check("rg_b stopped, at its next run", NewJoinLog(st, again), Presence{Current: true, JoinedAt: rejoined, EndedAt: again.Started})

			// The ramdisk comes back to that run, which stops asking its agents back
			// within 3 minutes: its end counts from then and three times the 45 s (a
			// quarter of the stream) within which a return refused is tried again, up to
			// three times, at every replica
			// and at its replica's next run, which starts before it.
			lease(again)
			b = NewJoinLog(st, again)
			fake.Advance(time.Second)
			rejoined = fake.Now()
			must(b.Joined("nd_1", "ramdisk", ""))
			fake.Advance(time.Second)
			must(b.Stopping(3*time.Minute, 45*time.Second))
			returnBy := fake.Now().Add(3*time.Minute + 3*45*time.Second)
			must(st.Update(func(tx *store.Tx) error { return tx.ReleaseLease(again) }))
			told := Presence{Current: true, JoinedAt: rejoined, EndedAt: returnBy, ReturnBy: returnBy}
			check("rg_b stopped asking back within 3 minutes, at rg_a", a, told)
			fake.Advance(time.Second)
			next := store.Holder{Replica: "rg_b", Started: fake.Now()}
			lease(next)
			check("rg_b stopped asking back within 3 minutes, at its next run", NewJoinLog(st, next), told)
			fake.Advance(time.Hour)
			check("an hour later, at rg_a", a, told)

			// The installed OS joins after the ramdisk: the ramdisk is not current, and
			// whoever waits for its return is told at once.
			returned = waitReturn(t, a)
			fake.Advance(time.Second)
			osJoined := fake.Now()
			must(a.Joined("nd_1", "node", ""))
			displaced := told
			displaced.Current, displaced.OtherJoinedAt = false, osJoined
			returned(displaced)
			check("the installed OS joined since", a, displaced)
		})
	}
}

// waitReturn starts l.WaitReturn for nd_1's ramdisk, checks that it waits, and returns
// what checks, once the caller made the ramdisk return or be displaced, that it returned
// want.
func waitReturn(t *testing.T, l *JoinLog) func(want Presence) {
	t.Helper()
	type result struct {
		p   Presence
		err error
	}
	woke := make(chan result, 1)
	go func() { p, err := l.WaitReturn(t.Context(), "nd_1", "ramdisk"); woke <- result{p, err} }()
	select {
	case r := <-woke:
		t.Fatalf("WaitReturn returned %+v, %v before the ramdisk came back or the installed OS joined", r.p, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	return func(want Presence) {
		t.Helper()
		select {
		case r := <-woke:
			if r.err != nil {
				t.Fatal(r.err)
			}
			if diff := cmp.Diff(want, r.p); diff != "" {
				t.Errorf("WaitReturn (-want +got):\n%s", diff)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("WaitReturn still waits")
		}
	}
}
