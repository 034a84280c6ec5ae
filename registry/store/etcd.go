package store

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The etcd key layout (docs/store.md). Under the prefix P:
//
//	P/<bucket>/<key>      one record or index entry: the same key and value bytes as in bbolt
//	P/<bucket>            the bucket's generation key, written by every transaction that
//	                      writes the bucket (its value is the writing replica's id)
//	P/~deleted/<bucket>   the bucket's deletion generation, written by every transaction
//	                      that deletes from the bucket (format 2 on)
//	P/~commit             the commit key, written by every transaction (etcdmirror.go)
//
// A transaction reads one snapshot of the replica's mirror, and commits only if every
// key it read is unchanged since, no key inside a range a cursor of it walked was
// written since, and nothing was deleted since from a bucket it walked: serializable,
// as bbolt's one writer is (docs/store.md, "Transactions").
const (
	// DefaultEtcdPrefix is the prefix the records live under when none is given.
	DefaultEtcdPrefix = "better-compute"
	// etcdMaxTxnOps is etcd's default --max-txn-ops: no transaction the store sends has
	// more compares, nor more operations at one level (more writes go in nested
	// transactions, nestOps).
	etcdMaxTxnOps = 128
	// etcdMaxSend is the largest request the client sends: etcd's own bound
	// (--max-request-bytes, 1.5 MiB by default) is what refuses a transaction, so a
	// cluster that raises it takes larger ones.
	etcdMaxSend = 64 << 20
	// etcdMaxAttempts bounds how often a transaction runs again after conflicts.
	etcdMaxAttempts = 50
	// etcdDeletedName is the name under the prefix of the deletion generations: not a
	// bucket.
	etcdDeletedName = "~deleted"
)

// EtcdConfig says where the etcd store is.
type EtcdConfig struct {
	// Endpoints are the cluster's client URLs (https://host:2379 with TLS).
	Endpoints []string
	// Prefix is the key prefix the records live under; DefaultEtcdPrefix when empty.
	// Several registries can share one cluster under different prefixes.
	Prefix string
	// TLS, when set, is the client's TLS configuration (CA, client certificate).
	TLS *tls.Config
	// Timeout bounds each request to etcd and the first connection (default 10s).
	Timeout time.Duration
	// CheckLimits, when set, has OpenEtcd check first that the cluster takes the largest
	// requests the store sends, and refuse one that does not with INVALID_CONFIG
	// (etcdlimits.go). A registry and `store copy` set it; tests that open many stores on
	// one cluster leave it out, as each check sends a MiB through the cluster's log.
	CheckLimits bool
}

// errTooLarge is a transaction etcd would refuse for its size.
var errTooLarge = errors.New("store: the transaction is too large for one etcd transaction")

// errConflicts is a transaction that met another replica's conflicting write each time
// it ran, etcdMaxAttempts times: it may pass later (Transient).
var errConflicts = errors.New("store: a transaction met a conflicting write")

// OpenEtcd opens the store held in an etcd cluster, as one replica among any number that
// share it. The OnWrite, OnNodeSpec and OnAgentCommand hooks of this Store learn of
// every commit, this replica's (on the committing goroutine, as with bbolt) and other
// replicas' (from an etcd watch, at least once, in commit order).
func OpenEtcd(cfg EtcdConfig, opts Options) (*Store, error) {
	opts.defaults()
	b, err := openEtcd(cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{kv: b, now: opts.Now, outdated: b.outdated, bounds: opts.Bounds}
	b.startWatch(s.remoteCommit)
	return upgraded(s, opts)
}

// etcdBackend is a store in etcd.
type etcdBackend struct {
	cli     *clientv3.Client
	prefix  string // ends with "/"
	timeout time.Duration
	// id marks this backend's commits in the generation and commit keys, so its watch
	// hands the hooks only other replicas' commits.
	id []byte
	// mirror is this replica's copy of the keys, barrier the reads that keep it honest
	// (etcdmirror.go).
	mirror  *mirror
	barrier barrier
	// lastCommit is the revision of this replica's last commit.
	lastCommit atomic.Int64
	ctx        context.Context
	stop       context.CancelFunc
	watching   sync.WaitGroup
	closeOnce  sync.Once
	// group collects the calls of Update and Batch for the next group commit
	// (etcdbatch.go).
	group group
	// outdated is marked when a snapshot holds a format this release cannot read
	// (readable): another replica raised it.
	outdated *outdated
	// conflicts counts the commits and the conflicts that made transactions run again.
	conflicts conflicts
	// flights are this replica's commits until their answer, and those whose answer was
	// lost (etcdflights.go).
	flights flights
}

func openEtcd(cfg EtcdConfig) (*etcdBackend, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("store: no etcd endpoints given")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultEtcdPrefix
	}
	if strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("store: etcd prefix %q must not end with /", cfg.Prefix)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, TLS: cfg.TLS, DialTimeout: cfg.Timeout, Logger: zap.NewNop(), MaxCallSendMsgSize: etcdMaxSend})
	if err != nil {
		return nil, fmt.Errorf("store: etcd %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	id := make([]byte, 8)
	crand.Read(id)
	ctx, stop := context.WithCancel(context.Background())
	b := &etcdBackend{cli: cli, prefix: cfg.Prefix + "/", timeout: cfg.Timeout, id: []byte(hex.EncodeToString(id)), mirror: newMirror(), group: group{gather: newGather()}, barrier: barrier{gather: newGather()}, ctx: ctx, stop: stop, outdated: newOutdated()}
	if cfg.CheckLimits {
		if err := b.probeLimits(); err != nil {
			b.close()
			if proto.CodeOf(err) == proto.InvalidConfig {
				return nil, err
			}
			return nil, fmt.Errorf("store: etcd %s: %w (is the cluster up and are the TLS options right?)", strings.Join(cfg.Endpoints, ","), err)
		}
	}
	tree, rev, err := b.load()
	if err != nil {
		b.close()
		return nil, fmt.Errorf("store: etcd %s: %w (is the cluster up and are the TLS options right?)", strings.Join(cfg.Endpoints, ","), err)
	}
	b.mirror.tree = tree
	b.mirror.publish(rev)
	return b, nil
}

func (b *etcdBackend) rpc() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, b.timeout)
}

// close stops the watch and the client; closing again does nothing more.
func (b *etcdBackend) close() (err error) {
	b.closeOnce.Do(func() {
		b.stop()
		close(b.mirror.closed)
		b.watching.Wait()
		err = b.cli.Close()
	})
	return err
}

func (b *etcdBackend) genKey(bucket string) string { return b.prefix + bucket }

// delKey is bucket's deletion generation key.
func (b *etcdBackend) delKey(bucket string) string {
	return b.prefix + etcdDeletedName + "/" + bucket
}

func (b *etcdBackend) recKey(bucket string, key []byte) string {
	return b.prefix + bucket + "/" + string(key)
}

// bucketRange is the range of bucket's record keys: [P/bucket/, P/bucket0).
func (b *etcdBackend) bucketRange(bucket string) (string, string) {
	return b.prefix + bucket + "/", b.prefix + bucket + "0"
}

func (b *etcdBackend) view(fn func(kvTx) error) error {
	tx, err := b.begin(true)
	if err != nil {
		return err
	}
	return fn(tx)
}

// viewAt runs fn on a snapshot at floor or later, and at or after this replica's last
// commit (so a request reads what it wrote), without a barrier of its own.
func (b *etcdBackend) viewAt(floor int64, fn func(kvTx) error) error {
	snap, err := b.mirror.at(max(floor, b.lastCommit.Load()), b.timeout)
	if err != nil {
		return err
	}
	tx, err := b.beginOn(snap, true)
	if err != nil {
		return err
	}
	return fn(tx)
}

// updateAlone runs fn in a transaction of its own, again after each conflict.
func (b *etcdBackend) updateAlone(fn func(kvTx) error) error {
	for attempt := 1; ; attempt++ {
		tx, err := b.begin(false)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			return err
		}
		ok, err := tx.commit()
		if err != nil {
			return err
		}
		if ok {
			for _, h := range tx.hooks {
				h()
			}
			return nil
		}
		b.conflicts.count(tx)
		if attempt == etcdMaxAttempts {
			return fmt.Errorf("%w %d times in a row; try again", errConflicts, attempt)
		}
		// Back off a little, with jitter, so contending replicas do not collide again.
		time.Sleep(time.Duration(rand.N(min(attempt, 20))+1) * time.Millisecond)
	}
}

// begin starts a transaction on a snapshot of the mirror holding every commit
// acknowledged before it began, of a format this release reads. A transaction that
// writes reads the format key, so its commit compares it: none commits once another
// replica raised the format, and run again it fails here.
func (b *etcdBackend) begin(readOnly bool) (*etcdTx, error) {
	snap, err := b.snapshot()
	if err != nil {
		return nil, err
	}
	return b.beginOn(snap, readOnly)
}

// beginAt is begin for a transaction that writes, on a snapshot at floor or later (a
// Reader's moment) and at or after this replica's last commit, without a barrier of its
// own; noFloor: with one. What the transaction reads, its commit compares, so a snapshot
// older than the commit's moment commits nothing it should not; and one at least as
// recent as the Reader's moment holds every commit acknowledged before it, so what a
// transaction that commits nothing answers is as linearizable as a View of the Reader.
func (b *etcdBackend) beginAt(floor int64) (*etcdTx, error) {
	if floor == noFloor {
		return b.begin(false)
	}
	snap, err := b.mirror.at(max(floor, b.lastCommit.Load()), b.timeout)
	if err != nil {
		return nil, err
	}
	return b.beginOn(snap, false)
}

// beginOn starts a transaction on snap, refused when snap's format is not one this
// release reads.
func (b *etcdBackend) beginOn(snap *mirrorSnap, readOnly bool) (*etcdTx, error) {
	if err := b.readable(snap); err != nil {
		return nil, err
	}
	t := b.txOn(snap, readOnly)
	if !readOnly {
		t.get(bucketFormat, formatKey)
	}
	return t, nil
}

// readable refuses snap when it holds a format this release cannot read (format.go),
// and marks the store outdated: another replica raised the format (or it was so when
// the store opened, which then fails).
func (b *etcdBackend) readable(snap *mirrorSnap) error {
	kv, _ := snap.get(b.recKey(bucketFormat, formatKey))
	if err := formatReadable(kv.value); err != nil {
		b.outdated.mark(err)
		return proto.Errorf(proto.Unavailable, "this replica cannot read the store any more (%w): it stops; try again, another replica answers", err)
	}
	return nil
}

// txOn starts a transaction on snap. A read-only one keeps no record of what it read:
// it commits nothing, so nothing it read needs comparing.
func (b *etcdBackend) txOn(snap *mirrorSnap, readOnly bool) *etcdTx {
	t := &etcdTx{b: b, snap: snap, readOnly: readOnly}
	if !readOnly {
		t.reads, t.writes = map[string]int64{}, map[string]*[]byte{}
	}
	return t
}

// etcdTx is one etcd transaction: reads from one snapshot of the mirror, writes buffered
// until commit.
type etcdTx struct {
	b        *etcdBackend
	snap     *mirrorSnap
	readOnly bool
	// reads holds the mod revision (0: missing) of every key read by get.
	reads map[string]int64
	// cursors are the cursors the transaction opened: each knows the range it read.
	cursors []*etcdCursor
	// writes holds the value of every key written (nil: deleted); wrote and deleted are
	// the buckets written and deleted from.
	writes  map[string]*[]byte
	wrote   []string
	deleted []string
	hooks   []func()
	// puts holds, in order, the keys (values unset) of writes that are puts (not
	// deletions), for the cursors to find the transaction's own keys without walking all
	// its writes at each step; nil until the first put.
	puts *btree.BTreeG[mirrorKV]
}

func (t *etcdTx) get(bucket string, key []byte) []byte {
	full := t.b.recKey(bucket, key)
	if v, ok := t.writes[full]; ok {
		if v == nil || len(*v) == 0 {
			return nil
		}
		return *v
	}
	kv, ok := t.snap.get(full)
	if !t.readOnly {
		t.reads[full] = kv.mod // 0 when missing
	}
	if !ok || len(kv.value) == 0 {
		return nil // an empty value reads as nil, as bbolt reads it
	}
	return kv.value
}

func (t *etcdTx) put(bucket string, key, value []byte) error {
	if t.readOnly {
		return errors.New("store: a write in a read-only transaction")
	}
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	full := t.b.recKey(bucket, key)
	t.writes[full] = &v
	if t.puts == nil {
		t.puts = btree.NewG(mirrorDegree, mirrorLess)
	}
	t.puts.ReplaceOrInsert(mirrorKV{key: full})
	t.markWrote(bucket)
	return nil
}

func (t *etcdTx) del(bucket string, key []byte) error {
	if t.readOnly {
		return errors.New("store: a write in a read-only transaction")
	}
	full := t.b.recKey(bucket, key)
	t.writes[full] = nil
	if t.puts != nil {
		t.puts.Delete(mirrorKV{key: full})
	}
	t.markWrote(bucket)
	if !slices.Contains(t.deleted, bucket) {
		t.deleted = append(t.deleted, bucket)
	}
	return nil
}

func (t *etcdTx) markWrote(bucket string) {
	if !slices.Contains(t.wrote, bucket) {
		t.wrote = append(t.wrote, bucket)
	}
}

func (t *etcdTx) onCommit(fn func()) { t.hooks = append(t.hooks, fn) }

func (t *etcdTx) buckets() []string {
	seen := map[string]bool{}
	from, end := t.b.prefix, clientv3.GetPrefixRangeEnd(t.b.prefix)
	for {
		kv, ok := firstIn(t.snap.tree, from, end)
		if !ok {
			break
		}
		rest := kv.key[len(t.b.prefix):]
		if name, _, rec := strings.Cut(rest, "/"); rec {
			seen[name], from = !strings.HasPrefix(name, "~"), t.b.prefix+name+"0"
		} else {
			seen[name], from = !strings.HasPrefix(name, "~"), kv.key+"\x00"
		}
	}
	for full, v := range t.writes {
		if name, _, ok := strings.Cut(full[len(t.b.prefix):], "/"); ok && v != nil {
			seen[name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for name, bucket := range seen {
		if bucket {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// commit sends the transaction; false when a key it read changed since (run it again).
func (t *etcdTx) commit() (bool, error) {
	if len(t.writes) == 0 {
		return true, nil
	}
	cmps := t.compares()
	ops, size := make([]clientv3.Op, 0, len(t.writes)+len(t.wrote)), 0
	for _, full := range slices.Sorted(mapKeys(t.writes)) {
		if v := t.writes[full]; v != nil {
			ops = append(ops, clientv3.OpPut(full, string(*v)))
			size += len(full) + len(*v)
		} else {
			ops = append(ops, clientv3.OpDelete(full))
			size += len(full)
		}
	}
	for _, bucket := range t.wrote {
		ops = append(ops, clientv3.OpPut(t.b.genKey(bucket), string(t.b.id)))
	}
	for _, bucket := range t.deleted {
		ops = append(ops, clientv3.OpPut(t.b.delKey(bucket), string(t.b.id)))
	}
	n := t.b.flights.start()
	ops = append(ops, clientv3.OpPut(t.b.commitKey(), t.b.commitValue(n)))
	nested, err := nestOps(ops, len(cmps))
	if err != nil {
		// Compares near etcd's bound leave each nested transaction room for a write or
		// two (128 less its parent's compares); the generations of the buckets read,
		// coarser, leave the writes nearly all of it.
		if coarse := t.bucketCompares(); len(coarse) < len(cmps) {
			cmps = coarse
			nested, err = nestOps(ops, len(cmps))
		}
	}
	ops = nested
	if err != nil {
		t.b.flights.end(n, false)
		return false, err
	}
	ctx, cancel := t.b.rpc()
	defer cancel()
	resp, err := t.b.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	switch {
	case errors.Is(err, rpctypes.ErrRequestTooLarge) || status.Code(err) == codes.ResourceExhausted:
		t.b.flights.end(n, false)
		return false, fmt.Errorf("%w: it writes %d bytes of keys and values, more than the cluster's --max-request-bytes takes (1.5 MiB by default): run every member with a larger --max-request-bytes (4 MiB, say)", errTooLarge, size)
	case errors.Is(err, rpctypes.ErrTooManyOps):
		t.b.flights.end(n, false)
		return false, fmt.Errorf("%w: the cluster's --max-txn-ops is below etcd's default %d, which the store needs: run every member with --max-txn-ops %d at least", errTooLarge, etcdMaxTxnOps, etcdMaxTxnOps)
	case err != nil:
		// Maybe applied: the watch tells the hooks if it sees it (etcdflights.go).
		t.b.flights.end(n, true)
		return false, proto.Errorf(proto.Unavailable, "the store's etcd cluster did not confirm the commit (%w): the write may have been made or not; read it back before trying again", err)
	}
	t.b.flights.end(n, false)
	if resp.Succeeded {
		t.b.committed(resp.Header.Revision)
		t.b.conflicts.committed()
	}
	return resp.Succeeded, nil
}

// committed notes rev as a revision this replica committed: later views on a Reader
// read at it or after.
func (b *etcdBackend) committed(rev int64) {
	for {
		last := b.lastCommit.Load()
		if rev <= last || b.lastCommit.CompareAndSwap(last, rev) {
			return
		}
	}
}

// compares are the conditions of the commit, as they held at the transaction's
// snapshot: every key read unchanged (keyCmp); no key inside a range a cursor read
// written since (rangeCmp: an insert or an update); nothing deleted since from a bucket
// a cursor walked (its deletion generation unchanged, delCmp). When they would be more
// compares than etcd takes, the generation of every bucket read stands for all of them
// (bucketCompares); commit takes those too when the writes do not fit beside them.
func (t *etcdTx) compares() []clientv3.Cmp {
	ranges := t.ranges()
	var cmps []clientv3.Cmp
	for full, rev := range t.reads {
		if !inRanges(ranges, full) {
			cmps = append(cmps, t.keyCmp(full, rev))
		}
	}
	var walked []string
	for _, r := range ranges {
		cmps = append(cmps, t.rangeCmp(r))
		if !slices.Contains(walked, r.bucket) {
			walked = append(walked, r.bucket)
			cmps = append(cmps, t.delCmp(r.bucket))
		}
	}
	if len(cmps) <= etcdMaxTxnOps {
		return cmps
	}
	return t.bucketCompares()
}

// bucketCompares are the coarse conditions of the commit: the generation of every
// bucket read unchanged since the snapshot (genCmp), standing for every key and range
// read of it; any write to such a bucket then conflicts. At most one a bucket.
func (t *etcdTx) bucketCompares() []clientv3.Cmp {
	var read []string
	for full := range t.reads {
		read = append(read, t.bucketOf(full))
	}
	for _, r := range t.ranges() {
		read = append(read, r.bucket)
	}
	slices.Sort(read)
	var cmps []clientv3.Cmp
	for _, bucket := range slices.Compact(read) {
		cmps = append(cmps, t.genCmp(bucket))
	}
	return cmps
}

func (t *etcdTx) keyCmp(full string, rev int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(full), "=", rev)
}

// rangeCmp holds while no key of r was put after the snapshot. A key deleted from r
// leaves no trace in it: delCmp catches that.
func (t *etcdTx) rangeCmp(r keyRange) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(r.from).WithRange(r.end), "<", t.snap.rev+1)
}

func (t *etcdTx) delCmp(bucket string) clientv3.Cmp {
	kv, _ := t.snap.get(t.b.delKey(bucket))
	return clientv3.Compare(clientv3.ModRevision(t.b.delKey(bucket)), "=", kv.mod)
}

func (t *etcdTx) genCmp(bucket string) clientv3.Cmp {
	kv, _ := t.snap.get(t.b.genKey(bucket))
	return clientv3.Compare(clientv3.ModRevision(t.b.genKey(bucket)), "=", kv.mod)
}

// keyRange is a range of full keys [from, end) of one bucket that a cursor read.
type keyRange struct {
	bucket, from, end string
}

// ranges are the ranges the transaction's cursors read, those of a bucket that touch
// or overlap merged, in key order.
func (t *etcdTx) ranges() []keyRange {
	var rs []keyRange
	for _, c := range t.cursors {
		if c.readFrom < c.readEnd {
			rs = append(rs, keyRange{bucket: c.bucket, from: c.readFrom, end: c.readEnd})
		}
	}
	slices.SortFunc(rs, func(a, b keyRange) int { return strings.Compare(a.from, b.from) })
	var merged []keyRange
	for _, r := range rs {
		if n := len(merged); n > 0 && merged[n-1].bucket == r.bucket && r.from <= merged[n-1].end {
			merged[n-1].end = max(merged[n-1].end, r.end)
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

// inRanges says whether full lies in one of ranges: a compare of the range covers a
// key read there (its update, its insert when it was missing, its deletion by delCmp).
func inRanges(ranges []keyRange, full string) bool {
	for _, r := range ranges {
		if r.from <= full && full < r.end {
			return true
		}
	}
	return false
}

// nestOps fits ops into one transaction with ncmps compares under etcd's bound on
// operations: as they are when they fit, else in nested transactions (no compares,
// always applied with the outer one), which etcd bounds to etcdMaxTxnOps less the outer
// transaction's own count each. With few compares that is thousands of writes.
func nestOps(ops []clientv3.Op, ncmps int) ([]clientv3.Op, error) {
	if len(ops) <= etcdMaxTxnOps {
		return ops, nil
	}
	for k := 1; k < etcdMaxTxnOps; k++ {
		per := etcdMaxTxnOps - max(ncmps, k)
		if per <= 0 || k*per < len(ops) {
			continue
		}
		nested := make([]clientv3.Op, 0, k)
		for chunk := range slices.Chunk(ops, per) {
			nested = append(nested, clientv3.OpTxn(nil, chunk, nil))
		}
		return nested, nil
	}
	return nil, fmt.Errorf("%w: it writes %d keys with its buckets' generations and reads %d keys or buckets, more than etcd takes in one transaction (--max-txn-ops %d)", errTooLarge, len(ops), ncmps, etcdMaxTxnOps)
}

func (t *etcdTx) bucketOf(full string) string {
	name, _, _ := strings.Cut(full[len(t.b.prefix):], "/")
	return name
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (t *etcdTx) cursor(bucket string) cursor {
	start, end := t.b.bucketRange(bucket)
	c := &etcdCursor{t: t, bucket: bucket, start: start, end: end}
	if !t.readOnly {
		t.cursors = append(t.cursors, c)
	}
	return c
}

// etcdCursor walks a bucket of the transaction's snapshot, with the transaction's own
// writes laid over it.
type etcdCursor struct {
	t          *etcdTx
	bucket     string
	start, end string
	// key is where the cursor stands (full key), "" when off either end.
	key string
	// [readFrom, readEnd) covers every range the cursor's moves read: what a move found
	// and the gap it looked across to find it (empty until the first move). A cursor
	// that stops early read up to the key it stopped at, not to the bucket's end.
	readFrom, readEnd string
	// ahead answers the forward moves from the snapshot's keys read ahead of them.
	ahead readAhead
}

func (c *etcdCursor) First() ([]byte, []byte)        { return c.move(c.start, landAtOrAfter) }
func (c *etcdCursor) Last() ([]byte, []byte)         { return c.move(c.end, landBefore) }
func (c *etcdCursor) Seek(k []byte) ([]byte, []byte) { return c.move(c.start+string(k), landAtOrAfter) }

func (c *etcdCursor) Next() ([]byte, []byte) {
	if c.key == "" {
		return nil, nil
	}
	return c.move(c.key, landAfter)
}

func (c *etcdCursor) Prev() ([]byte, []byte) {
	if c.key == "" {
		return nil, nil
	}
	return c.move(c.key, landBefore)
}

// landing is the key a move lands on, named from the key it starts at.
type landing int

const (
	// landAtOrAfter is the first key at or after it (First, Seek).
	landAtOrAfter landing = iota
	// landAfter is the first key after it (Next).
	landAfter
	// landBefore is the last key before it (Last, Prev).
	landBefore
)

// move lands on the key that to names from the key from, among the stored keys not
// deleted by the transaction and the keys it put.
func (c *etcdCursor) move(from string, to landing) ([]byte, []byte) {
	c.key = ""
	stored, ok := c.stored(from, to)
	for ok {
		if w, written := c.t.writes[stored.key]; !written || w != nil {
			break
		}
		// Deleted in this transaction: look past it.
		if to == landBefore {
			stored, ok = c.stored(stored.key, landBefore)
		} else {
			stored, ok = c.stored(stored.key, landAfter)
		}
	}
	forward := to != landBefore
	if to == landAfter && !c.t.readOnly {
		// The keys after from are those at or after its successor: where the move looks
		// for the transaction's puts and where the range it read begins (a read-only
		// transaction has neither).
		from += "\x00"
	}
	// The transaction's own put nearest from, if it comes before the stored key found.
	best, found := stored.key, ok
	if put, ok := c.t.putNear(from, forward, c.start, c.end); ok && (!found || forward && put.key < best || !forward && put.key > best) {
		best, found = put.key, true
	}
	switch {
	case c.t.readOnly:
		// It commits nothing: no range of it is compared.
	case forward && found:
		c.read(from, best+"\x00")
	case forward:
		c.read(from, c.end)
	case found:
		c.read(best, from)
	default:
		c.read(c.start, from)
	}
	if !found {
		return nil, nil
	}
	c.key = best
	if v, ok := c.t.writes[best]; ok {
		return []byte(best[len(c.start):]), *v
	}
	return []byte(best[len(c.start):]), stored.value
}

// putNear is the first key the transaction put at or after from (forward) or the last
// it put before from (backward), among those in [start, end).
func (t *etcdTx) putNear(from string, forward bool, start, end string) (put mirrorKV, ok bool) {
	switch {
	case t.puts == nil:
		return put, false
	case forward:
		return firstIn(t.puts, max(from, start), end)
	}
	return lastIn(t.puts, start, min(from, end))
}

// read widens the range the cursor read to cover [from, end), within its bucket.
func (c *etcdCursor) read(from, end string) {
	from, end = max(from, c.start), min(end, c.end)
	if from >= end {
		return
	}
	if c.readFrom == c.readEnd {
		c.readFrom, c.readEnd = from, end
		return
	}
	c.readFrom, c.readEnd = min(c.readFrom, from), max(c.readEnd, end)
}

// stored is the stored key that to names from the key from. Forward, it answers from
// the keys read ahead (readAhead), reading further ahead when from is past them;
// backward, from the tree's root each time (the store walks back rarely and briefly:
// over a profile's deleted versions).
func (c *etcdCursor) stored(from string, to landing) (mirrorKV, bool) {
	switch to {
	case landBefore:
		return lastIn(c.t.snap.tree, c.start, min(from, c.end))
	case landAfter:
		if kv, ok, known := c.ahead.after(from); known {
			return kv, ok
		}
		from += "\x00"
	}
	from = max(from, c.start)
	if !c.ahead.covers(from) {
		c.ahead.fill(c.t.snap, from, c.end)
	}
	return c.ahead.first(from)
}

// remoteCommit is what one commit of another replica wrote, as the watch saw it.
type remoteCommit struct {
	// buckets are the buckets it wrote.
	buckets []string
	// puts are the records it put (not those it deleted).
	puts []remotePut
	// ended are the runs it ended: their entries in the running runs' index deleted.
	ended []string
	// lost says events were lost (the watch fell behind a compaction): treat every
	// bucket as written and every record as put. loaded, then, is the store as the
	// watch loaded it again, which the records are read from: with no round of the
	// cluster, so a cluster gone again by then loses none of them.
	lost   bool
	loaded kvTx
	// own, for a commit of this replica, is its flight: it is told only when its answer
	// was lost, as its hooks then never ran on its caller (etcdflights.go).
	own *flight
}

type remotePut struct {
	bucket     string
	key, value []byte
}

// decodeCommit reads the events of one commit: what it wrote, whether this replica made
// it (own), and then its number (ownCommit).
func (b *etcdBackend) decodeCommit(events []*clientv3.Event) (c remoteCommit, own bool, n uint64) {
	for _, ev := range events {
		rest, ok := strings.CutPrefix(string(ev.Kv.Key), b.prefix)
		if !ok {
			continue
		}
		name, key, rec := strings.Cut(rest, "/")
		switch {
		case !rec && ev.Type == clientv3.EventTypePut && name == etcdCommitName:
			if num, ok := b.ownCommit(ev.Kv.Value); ok {
				own, n = true, num
			}
		case !rec && ev.Type == clientv3.EventTypePut:
			own = own || bytes.Equal(ev.Kv.Value, b.id)
			c.buckets = append(c.buckets, name)
		case rec && ev.Type == clientv3.EventTypePut && name != etcdDeletedName:
			c.puts = append(c.puts, remotePut{bucket: name, key: []byte(key), value: ev.Kv.Value})
		case rec && ev.Type == clientv3.EventTypeDelete && name == bucketRunningRuns:
			c.ended = append(c.ended, key)
		}
	}
	return c, own, n
}

// check reports the keys under the prefix outside the layout, and buckets holding
// records without the generation key every write makes. It reads what etcd holds now,
// not the mirror.
func (b *etcdBackend) check() []error {
	tree, rev, err := b.load()
	if err != nil {
		return []error{proto.Errorf(proto.Unavailable, "the store's etcd cluster did not answer a read (%v); try again once a majority of its members answer", err)}
	}
	var errs []error
	tx := b.txOn(&mirrorSnap{tree: tree, rev: rev}, true)
	for _, name := range tx.buckets() {
		if gen, _ := tx.snap.get(b.genKey(name)); gen.mod == 0 {
			errs = append(errs, fmt.Errorf("store: etcd bucket %s holds records but no generation key %q", name, b.genKey(name)))
		}
		c := tx.cursor(name)
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) == 0 {
				errs = append(errs, fmt.Errorf("store: etcd key %q has an empty record key", b.recKey(name, k)))
			}
		}
	}
	return errs
}
