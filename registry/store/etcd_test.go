package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// replicas opens n stores on one etcd prefix of the shared cluster, as openReplicas,
// and checks the store's consistency at the end.
func replicas(t *testing.T, n int) []*Store {
	t.Helper()
	out := openReplicas(t, EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}, n)
	t.Cleanup(func() {
		if err := out[0].Check(); err != nil {
			t.Errorf("the store is not consistent: %v", err)
		}
	})
	return out
}

// openReplicas opens n stores on cfg, each with its own client, as n registry replicas
// would; they close when the test ends.
func openReplicas(t testing.TB, cfg EtcdConfig, n int) []*Store {
	t.Helper()
	var out []*Store
	for range n {
		s, err := OpenEtcd(cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s)
	}
	return out
}

// raced runs fn on every store at once: each first run of fn stops after its reads and
// writes, before its commit, until every store's fn got there, so all of them read the
// same state and all but one commit must find a conflict.
func raced(stores []*Store, fn func(tx *Tx) error) []error {
	var ready sync.WaitGroup
	ready.Add(len(stores))
	errs := make([]error, len(stores))
	var done sync.WaitGroup
	for i, s := range stores {
		done.Go(func() {
			first := true
			errs[i] = s.Update(func(tx *Tx) error {
				err := fn(tx)
				if first {
					first = false
					ready.Done()
					ready.Wait()
				}
				return err
			})
		})
	}
	done.Wait()
	return errs
}

// TestEtcdReplicasConsumeJoinTokenOnce races three replicas (three etcd clients) to
// consume one join token, each having read it unused: exactly one is admitted, the others
// are told the token was used.
func TestEtcdReplicasConsumeJoinTokenOnce(t *testing.T) {
	stores := replicas(t, 3)
	for round := range 5 {
		var secret string
		if err := stores[0].Update(func(tx *Tx) (err error) {
			_, secret, err = tx.CreateJoinToken(TokenFor{Kind: TokenProvisioned, NodeID: fmt.Sprintf("node-%d", round)}, tx.Now().Add(time.Hour))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		errs := raced(stores, func(tx *Tx) error { _, err := tx.ConsumeJoinToken(secret, ""); return err })
		admitted := 0
		for i, err := range errs {
			if err == nil {
				admitted++
			} else if e := proto.AsError(err); e.Code != proto.Unauthenticated || e.Details.Reason != proto.ReasonTokenUsed {
				t.Errorf("round %d, replica %d: got %v, want UNAUTHENTICATED token-used", round, i, err)
			}
		}
		if admitted != 1 {
			t.Fatalf("round %d: %d replicas consumed the token, want exactly 1", round, admitted)
		}
	}
}

// TestEtcdScannedRangeConflicts races three replicas that each create a tenant only when
// a scan finds none: a record inserted into a range another transaction scanned is a
// conflict too, so exactly one tenant exists afterwards.
func TestEtcdScannedRangeConflicts(t *testing.T) {
	stores := replicas(t, 3)
	var mu sync.Mutex
	next := 0
	errs := raced(stores, func(tx *Tx) error {
		got, _, err := tx.Tenants(Page{})
		if err != nil || len(got) > 0 {
			return err
		}
		mu.Lock()
		next++
		name := fmt.Sprintf("first%d", next)
		mu.Unlock()
		_, err = tx.CreateTenant(name)
		return err
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	stores[1].View(func(tx *Tx) error {
		got, _, err := tx.Tenants(Page{})
		if err != nil || len(got) != 1 {
			t.Fatalf("tenants after the race: %v, %v; want exactly one", got, err)
		}
		return nil
	})
}

// TestEtcdRevocationRefusedByEveryReplica: a credential revoked through one replica is
// refused by the others from the moment the revocation is acknowledged, as it would be
// by the replica that revoked it: a View on etcd is a linearizable read, never a
// member's possibly older copy. Each round makes a credential through one replica,
// checks that the two others accept it, revokes it through the first and at once
// authenticates it through the two others.
func TestEtcdRevocationRefusedByEveryReplica(t *testing.T) {
	stores := replicas(t, 3)
	if err := stores[0].Update(func(tx *Tx) error { _, err := tx.CreateTenant("acme"); return err }); err != nil {
		t.Fatal(err)
	}
	authenticate := func(s *Store, bearer string) error {
		return s.View(func(tx *Tx) error { _, err := tx.Authenticate(bearer); return err })
	}
	for round := range 100 {
		writer := stores[round%len(stores)]
		var cred Credential
		var bearer string
		if err := writer.Update(func(tx *Tx) (err error) {
			cred, bearer, err = tx.CreateCredential("acme", []string{"nodes.read"}, time.Time{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for i, s := range stores {
			if err := authenticate(s, bearer); s != writer && err != nil {
				t.Fatalf("round %d: replica %d refuses a credential made before it asked: %v", round, i, err)
			}
		}
		if err := writer.Update(func(tx *Tx) error { _, err := tx.RevokeCredential(cred.ID); return err }); err != nil {
			t.Fatal(err)
		}
		for i, s := range stores {
			err := authenticate(s, bearer)
			if proto.CodeOf(err) != proto.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
				t.Fatalf("round %d: replica %d after the revocation was acknowledged: %v, want UNAUTHENTICATED (revoked)", round, i, err)
			}
		}
	}
}

// TestEtcdRemoteCommitFiresHooks checks that a replica's OnWrite and OnNodeSpec hooks learn
// of commits another replica made.
func TestEtcdRemoteCommitFiresHooks(t *testing.T) {
	stores := replicas(t, 2)
	local, remote := stores[0], stores[1]
	wrote := make(chan struct{}, 10)
	defer local.OnWrite(func() { wrote <- struct{}{} }, BucketSites)()
	type gen struct {
		node string
		gen  int64
	}
	specs := make(chan gen, 10)
	defer local.OnNodeSpec(func(node string, g int64) { specs <- gen{node, g} })()

	if err := remote.Update(func(tx *Tx) error { _, err := tx.CreateSite("rack-a"); return err }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wrote:
	case <-time.After(30 * time.Second):
		t.Fatal("the site another replica created never reached this replica's OnWrite hook")
	}
	commands := make(chan AgentCommand, 10)
	defer local.OnAgentCommand(func(c AgentCommand) { commands <- c })()
	if err := remote.Update(func(tx *Tx) error {
		_, err := tx.EnqueueAgentCommand("nd_1", proto.RoleRamdisk, proto.Command{ID: "c1", Kind: "disk.wipe"}, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-commands:
		if c.Node != "nd_1" || c.ID != "c1" || c.Kind != "disk.wipe" || c.Done {
			t.Fatalf("hook got %+v, want nd_1's pending command c1", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the command another replica enqueued never reached this replica's OnAgentCommand hook")
	}
	for want := int64(1); want <= 2; want++ {
		if err := remote.Update(func(tx *Tx) error {
			_, err := tx.SetNodeSpec(proto.NodeSpec{Node: "nd_1", Role: proto.RoleSite, Labels: map[string]string{"gen": fmt.Sprint(want)}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-specs:
			if got != (gen{"nd_1", want}) {
				t.Fatalf("hook got %v, want nd_1 generation %d", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("generation %d another replica set never reached this replica's OnNodeSpec hook", want)
		}
	}
	// A NodeSpec whose host section is its node's (its record holds none of it) reaches
	// the hook too, and this replica reads it with the node's section.
	mustUpdate(t, remote, func(tx *Tx) error {
		if _, err := tx.CreateTenant("acme"); err != nil {
			return err
		}
		_, err := tx.CreatePool(Pool{Tenant: "acme", Name: "gpu", Site: "rack-a", Policy: PoolPolicy{HardwareProfile: "gpu-redfish"}})
		return err
	})
	n := addNode(t, remote)
	host := []HostUnit{{Unit: "nvidia-driver", Settings: json.RawMessage(`{"branch":"580"}`)}}
	mustUpdate(t, remote, func(tx *Tx) error {
		node, err := tx.UpdateNode(n.ID, func(n *Node) error { n.Host = host; return nil })
		if err != nil {
			return err
		}
		_, err = tx.SetNodeSpec(proto.NodeSpec{Node: n.ID, Role: proto.RoleNode, Host: asUnits(node.Host)})
		return err
	})
	select {
	case got := <-specs:
		if got != (gen{n.ID, 1}) {
			t.Fatalf("hook got %v, want %s generation 1", got, n.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the NodeSpec of a node's own host section another replica set never reached this replica's OnNodeSpec hook")
	}
	var spec proto.NodeSpec
	if err := local.View(func(tx *Tx) (err error) { spec, err = tx.NodeSpec(n.ID); return err }); err != nil || len(spec.Host) != 1 || string(spec.Host[0].Settings) != `{"branch":"580"}` {
		t.Errorf("this replica reads the NodeSpec as %+v, %v", spec, err)
	}
}

// TestEtcdLargeTransactions checks the bounds of one transaction: more writes than etcd
// takes in a flat transaction commit (nested), and one with too many writes or bytes is
// refused with a clear error and writes nothing.
func TestEtcdLargeTransactions(t *testing.T) {
	s := replicas(t, 1)[0]
	write := func(n int, name string) error {
		return s.Update(func(tx *Tx) error {
			for i := range n {
				if err := tx.putRaw(bucketImageList, fmt.Appendf(nil, "%s%05d", name, i), []byte("x")); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := write(1000, "ok"); err != nil {
		t.Fatalf("1000 writes in one transaction: %v", err)
	}
	if err := write(5000, "big"); !errors.Is(err, errTooLarge) {
		t.Fatalf("5000 writes: got %v, want the transaction refused as too large", err)
	}
	for _, size := range []int{1700 << 10, 3 << 20} {
		huge := s.Update(func(tx *Tx) error { return tx.putRaw(bucketImageList, []byte("huge"), make([]byte, size)) })
		if !errors.Is(huge, errTooLarge) || !strings.Contains(huge.Error(), "--max-request-bytes") {
			t.Fatalf("%d bytes in one transaction: got %v, want it refused as larger than etcd's request bound", size, huge)
		}
	}
	s.View(func(tx *Tx) error {
		c := tx.kv.cursor(bucketImageList)
		n := 0
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		if n != 1000 {
			t.Errorf("%d keys stored, want the 1000 of the transaction that fit", n)
		}
		return nil
	})
}

// TestEtcdMemberKilled kills etcd members one at a time under two replicas: with two of
// three members up, every write is committed and read back, and the other replica's hooks
// still learn of it (its watch moves to a member that is up).
func TestEtcdMemberKilled(t *testing.T) {
	cluster := etcdtest.Start(t)
	stores := openReplicas(t, EtcdConfig{Endpoints: cluster.Endpoints, Prefix: "killed"}, 2)
	wrote := make(chan struct{}, 100)
	defer stores[0].OnWrite(func() { wrote <- struct{}{} }, BucketSites)()
	for victim := range etcdtest.Members {
		cluster.Kill(victim)
		site := fmt.Sprintf("rack-%d", victim)
		if err := stores[1].Update(func(tx *Tx) error { _, err := tx.CreateSite(site); return err }); err != nil {
			t.Fatalf("member %d down: %v", victim, err)
		}
		if err := stores[0].View(func(tx *Tx) error { _, err := tx.Site(site); return err }); err != nil {
			t.Fatalf("member %d down, the site the other replica made: %v", victim, err)
		}
		select {
		case <-wrote:
		case <-time.After(time.Minute):
			t.Fatalf("member %d down: the other replica's write never reached the hook", victim)
		}
		cluster.Restart(t, victim)
	}
}

// TestEtcdCheckLayout checks that Check finds records written under the prefix without
// their bucket's generation key (by something other than the store: transactions that
// scanned the bucket would not see the write as a conflict) and empty record keys.
func TestEtcdCheckLayout(t *testing.T) {
	s := replicas(t, 1)[0]
	if err := s.Update(func(tx *Tx) error { _, err := tx.CreateTenant("acme"); return err }); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("a store written through its write paths: %v", err)
	}
	b := s.kv.(*etcdBackend)
	ctx, cancel := b.rpc()
	defer cancel()
	for _, k := range []string{b.recKey("stray", []byte("k")), b.recKey(bucketTenants, nil)} {
		if _, err := b.cli.Put(ctx, k, "\x01{}"); err != nil {
			t.Fatal(err)
		}
	}
	err := s.Check()
	if err == nil || !strings.Contains(err.Error(), "bucket stray holds records but no generation key") ||
		!strings.Contains(err.Error(), "has an empty record key") {
		t.Fatalf("got %v, want the bucket without a generation key and the empty record key", err)
	}
	// Leave the store consistent for the check replicas runs when the test ends.
	if _, err := b.cli.Delete(ctx, b.recKey("stray", []byte("k"))); err != nil {
		t.Fatal(err)
	}
	if _, err := b.cli.Delete(ctx, b.recKey(bucketTenants, nil)); err != nil {
		t.Fatal(err)
	}
}

// TestEtcdCompactionUnderATransaction compacts etcd's history past a transaction's
// snapshot while it runs, after another replica wrote what it scanned: the transaction
// reads its snapshot of the mirror to the end (compaction cannot reach it), its commit
// meets the conflict, and it runs again on a new snapshot and commits what that one says.
func TestEtcdCompactionUnderATransaction(t *testing.T) {
	stores := replicas(t, 2)
	s, other := stores[0], stores[1]
	b := s.kv.(*etcdBackend)
	runs := 0
	err := s.Update(func(tx *Tx) error {
		runs++
		if _, _, err := tx.Sites(Page{}); err != nil {
			return err
		}
		if runs == 1 {
			// Another replica writes, and the history up to its write is compacted away.
			if err := other.Update(func(tx *Tx) error { _, err := tx.CreateSite("rack-a"); return err }); err != nil {
				return err
			}
			ctx, cancel := b.rpc()
			defer cancel()
			resp, err := b.cli.Get(ctx, "x")
			if err != nil {
				return err
			}
			if _, err := b.cli.Compact(ctx, resp.Header.Revision); err != nil {
				return err
			}
		}
		sites, _, err := tx.Sites(Page{})
		if err != nil {
			return err
		}
		_, err = tx.CreateTenant(fmt.Sprintf("seen%d", len(sites)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 {
		t.Fatalf("the transaction ran %d times, want 2 (again after the conflict)", runs)
	}
	s.View(func(tx *Tx) error {
		if _, err := tx.Tenant("seen1"); err != nil {
			t.Errorf("the second run saw the site: %v", err)
		}
		if _, err := tx.Tenant("seen0"); proto.CodeOf(err) != proto.NotFound {
			t.Errorf("the first run's write was kept: %v", err)
		}
		return nil
	})
}

// TestEtcdWatchBehindCompactionReloads starts a replica's watch after the history it
// would resume from was compacted away, with a write of another replica in the lost
// events: the mirror is loaded again at the present, so the replica reads the write, and
// every OnWrite hook runs (events were lost).
func TestEtcdWatchBehindCompactionReloads(t *testing.T) {
	cfg := EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}
	other := openReplicas(t, cfg, 1)[0]
	b, err := openEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{kv: b, now: time.Now, outdated: b.outdated}
	t.Cleanup(func() { s.Close() })
	for _, site := range []string{"rack-a", "rack-b"} {
		if err := other.Update(func(tx *Tx) error { _, err := tx.CreateSite(site); return err }); err != nil {
			t.Fatal(err)
		}
	}
	// The history is compacted up to the second write: the first is lost to the watch.
	ctx, cancel := b.rpc()
	defer cancel()
	resp, err := b.cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan struct{}, 10)
	defer s.OnWrite(func() { wrote <- struct{}{} }, BucketImages)()
	b.startWatch(s.remoteCommit)
	if err := s.View(func(tx *Tx) error { _, err := tx.Site("rack-a"); return err }); err != nil {
		t.Fatalf("the replica does not read the site written in the events its watch lost: %v", err)
	}
	select {
	case <-wrote:
	case <-time.After(30 * time.Second):
		t.Fatal("after lost events, the OnWrite hooks were not run")
	}
}

// TestEtcdLostEventsToldWhileTheClusterIsAway has a replica's watch fall behind a
// compaction that took a NodeSpec another replica set: the watch loads the store again,
// and the link to the cluster goes as the hooks are told. The OnNodeSpec hook is told of
// the NodeSpec from what the watch loaded: before, the hooks read the store again
// through a round of the cluster, which failed, and told no NodeSpec nor command of the
// lost events, ever (only a warning was logged), so none was pushed to the agents whose
// sessions were here until they reconnected.
func TestEtcdLostEventsToldWhileTheClusterIsAway(t *testing.T) {
	cluster := etcdtest.Shared(t)
	proxy := cluster.Proxy(t, 0)
	prefix := etcdtest.Prefix(t)
	other := openReplicas(t, EtcdConfig{Endpoints: cluster.Endpoints, Prefix: prefix}, 1)[0]
	b, err := openEtcd(EtcdConfig{Endpoints: []string{proxy.Endpoint}, Prefix: prefix, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{kv: b, now: time.Now, outdated: b.outdated}
	t.Cleanup(func() { s.Close() })
	mustUpdate(t, other, func(tx *Tx) error {
		_, err := tx.SetNodeSpec(proto.NodeSpec{Node: "site-a", Role: proto.RoleSite})
		return err
	})
	mustUpdate(t, other, func(tx *Tx) error { _, err := tx.CreateSite("rack-a"); return err })
	// The history is compacted up to the site: the watch, started after, lost the
	// NodeSpec.
	ctx, cancel := b.rpc()
	defer cancel()
	resp, err := b.cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	away := make(chan struct{})
	var once sync.Once
	// Every OnWrite hook runs first after lost events: the link goes then.
	defer s.OnWrite(func() {
		once.Do(func() {
			proxy.LoseAnswers()
			close(away)
		})
	}, BucketSites)()
	specs := make(chan string, 10)
	defer s.OnNodeSpec(func(node string, _ int64) { specs <- node })()
	b.startWatch(s.remoteCommit)
	select {
	case <-away:
	case <-time.After(30 * time.Second):
		t.Fatal("after lost events, the OnWrite hooks were not run")
	}
	// The link comes back a while later.
	time.AfterFunc(3*time.Second, proxy.Heal)
	select {
	case node := <-specs:
		if node != "site-a" {
			t.Fatalf("the hook was told of %s's NodeSpec, want site-a's", node)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the NodeSpec set in the events the watch lost never reached the OnNodeSpec hook")
	}
}

// TestEtcdReaderSeesWhatCameBefore makes a tenant through one replica, then takes a
// Reader at another: each of the Reader's Views sees the tenant, a hundred times over.
func TestEtcdReaderSeesWhatCameBefore(t *testing.T) {
	madeThenRead(t, func(i int, rd Reader, name string) {
		for range 2 {
			if err := rd.View(func(tx *Tx) error { _, err := tx.Tenant(name); return err }); err != nil {
				t.Fatalf("round %d: a Reader taken after the tenant was made does not see it: %v", i, err)
			}
		}
	})
}

// madeThenRead makes a tenant through one of two replicas, then takes a Reader at the
// other and hands both to read, a hundred times, the replicas taking turns.
func madeThenRead(t *testing.T, read func(i int, rd Reader, name string)) {
	stores := replicas(t, 2)
	for i := range 100 {
		name := fmt.Sprintf("r%d", i)
		if err := stores[i%2].Update(func(tx *Tx) error { _, err := tx.CreateTenant(name); return err }); err != nil {
			t.Fatal(err)
		}
		rd, err := stores[(i+1)%2].Reader()
		if err != nil {
			t.Fatal(err)
		}
		read(i, rd, name)
	}
}

// TestEtcdCloseTwice closes a store twice: the second does nothing (no panic, no error).
func TestEtcdCloseTwice(t *testing.T) {
	s, err := OpenEtcd(EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("closing again: %v", err)
	}
}

// TestEtcdReaderSeesItsOwnWrites takes a Reader, then writes through the same store: the
// Reader's next View sees the write (a request reads what it wrote, although the Reader's
// moment came before), a hundred times over.
func TestEtcdReaderSeesItsOwnWrites(t *testing.T) {
	s := replicas(t, 1)[0]
	for i := range 100 {
		rd, err := s.Reader()
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("own%d", i)
		if err := s.Update(func(tx *Tx) error { _, err := tx.CreateTenant(name); return err }); err != nil {
			t.Fatal(err)
		}
		if err := rd.View(func(tx *Tx) error { _, err := tx.Tenant(name); return err }); err != nil {
			t.Fatalf("round %d: a View after the Reader's own store wrote the tenant does not see it: %v", i, err)
		}
	}
}

// TestEtcdReaderUpdateTakesNoBarrier writes through a Reader twenty times: no barrier
// round is sent for the writes (they read at the Reader's moment and their commits
// compare what they read), each write is seen by the Reader's next View, and a write
// through the store itself, with no Reader, still takes a round of its own.
func TestEtcdReaderUpdateTakesNoBarrier(t *testing.T) {
	s := replicas(t, 1)[0]
	rd, err := s.Reader()
	if err != nil {
		t.Fatal(err)
	}
	before, _ := s.TxStats()
	for i := range 20 {
		name := fmt.Sprintf("w%d", i)
		if err := rd.Update(func(tx *Tx) error { _, err := tx.CreateTenant(name); return err }); err != nil {
			t.Fatal(err)
		}
		if err := rd.View(func(tx *Tx) error { _, err := tx.Tenant(name); return err }); err != nil {
			t.Fatalf("write %d: the Reader's View does not see what its Update wrote: %v", i, err)
		}
	}
	after, _ := s.TxStats()
	if n := after.BarrierRounds - before.BarrierRounds; n != 0 || after.Commits-before.Commits != 20 {
		t.Errorf("20 writes through a Reader: %d barrier rounds and %d commits; want none and 20", n, after.Commits-before.Commits)
	}
	if err := s.Update(func(tx *Tx) error { _, err := tx.CreateTenant("alone"); return err }); err != nil {
		t.Fatal(err)
	}
	if last, _ := s.TxStats(); last.BarrierRounds == after.BarrierRounds {
		t.Error("a write with no Reader sent no barrier round: it could miss a commit another replica acknowledged before it began")
	}
}

// TestEtcdReaderUpdateSeesWhatCameBefore makes a tenant through one replica, then takes
// a Reader at another and runs through it an Update that reads the tenant and writes
// nothing, so that no commit's compare checks what it read: it finds the tenant, a
// hundred times over (it would miss it if it read the replica's mirror before the
// mirror reached the Reader's moment).
func TestEtcdReaderUpdateSeesWhatCameBefore(t *testing.T) {
	madeThenRead(t, func(i int, rd Reader, name string) {
		if err := rd.Update(func(tx *Tx) error { _, err := tx.Tenant(name); return err }); err != nil {
			t.Fatalf("round %d: an Update through a Reader taken after the tenant was made does not see it: %v", i, err)
		}
	})
}

// TestEtcdBarrierGathersUnderLoad: 8 readers through one replica, each taking a Reader
// ten times with 3 ms of its own work between (a request's way back: its answer, the
// next request's TLS and HTTP), the longest wait made 100 ms so that on any machine
// every released reader is back before it ends. It counts barrier rounds, not time: a
// round after a round of several waits for the readers that round released, so the 80
// Readers take about ten rounds, one a turn of the readers; a fixed wait shorter than
// their way back sends a round for the first few back and another for the rest.
func TestEtcdBarrierGathersUnderLoad(t *testing.T) {
	s := replicas(t, 1)[0]
	s.kv.(*etcdBackend).barrier.gather.max = 100 * time.Millisecond
	const readers, turns = 8, 10
	before, _ := s.TxStats()
	inLoops(t, readers, turns, func(int, int) error {
		_, err := s.Reader()
		time.Sleep(3 * time.Millisecond)
		return err
	})
	after, _ := s.TxStats()
	rounds, most := after.BarrierRounds-before.BarrierRounds, int64(turns+5)
	t.Logf("%d Readers of %d readers in %d barrier rounds", readers*turns, readers, rounds)
	if rounds > most {
		t.Errorf("%d Readers of %d readers in a loop took %d barrier rounds, want at most %d: the round after a round of several did not wait for the readers it released", readers*turns, readers, rounds, most)
	}
}
