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
	"time"

	"github.com/better-compute/better-compute/proto"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The etcd key layout (docs/store.md). Under the prefix P:
//
//	P/<bucket>/<key>  one record or index entry: the same key and value bytes as in bbolt
//	P/<bucket>        the bucket's generation key, written by every transaction that
//	                  writes the bucket (its value is the writing replica's id)
//
// A transaction reads at one revision, and commits only if every key it read, and the
// generation key of every bucket it scanned, is unchanged since: serializable, as bbolt's
// one writer is.
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
	// etcdFirstPage is how many keys a cursor reads first: most walks stop early (a page
	// of 20 and the one after it, a node's few records under a prefix); etcdPage is how
	// many it reads at once after that.
	etcdFirstPage = 32
	etcdPage      = 256
	// etcdMaxAttempts bounds how often a transaction runs again after conflicts.
	etcdMaxAttempts = 50
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
}

// errTooLarge is a transaction etcd would refuse for its size.
var errTooLarge = errors.New("store: the transaction is too large for one etcd transaction")

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
	s := &Store{kv: b, now: opts.Now}
	b.startWatch(s.remoteCommit)
	return s, nil
}

// etcdBackend is a store in etcd.
type etcdBackend struct {
	cli     *clientv3.Client
	prefix  string // ends with "/"
	timeout time.Duration
	// id marks this backend's commits in the generation keys, so its watch skips them.
	id []byte
	// startRev is the revision the watch starts after.
	startRev int64
	ctx      context.Context
	stop     context.CancelFunc
	watching sync.WaitGroup
	// pending is the batch collecting calls of Batch (etcdbatch.go).
	batchMu sync.Mutex
	pending *etcdBatch
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
	b := &etcdBackend{cli: cli, prefix: cfg.Prefix + "/", timeout: cfg.Timeout, id: []byte(hex.EncodeToString(id)), ctx: ctx, stop: stop}
	rctx, cancel := b.rpc()
	defer cancel()
	resp, err := cli.Get(rctx, b.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		b.close()
		return nil, fmt.Errorf("store: etcd %s: %w (is the cluster up and are the TLS options right?)", strings.Join(cfg.Endpoints, ","), err)
	}
	b.startRev = resp.Header.Revision
	return b, nil
}

func (b *etcdBackend) rpc() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, b.timeout)
}

func (b *etcdBackend) close() error {
	b.stop()
	b.watching.Wait()
	return b.cli.Close()
}

func (b *etcdBackend) genKey(bucket string) string { return b.prefix + bucket }

func (b *etcdBackend) recKey(bucket string, key []byte) string {
	return b.prefix + bucket + "/" + string(key)
}

// bucketRange is the range of bucket's record keys: [P/bucket/, P/bucket0).
func (b *etcdBackend) bucketRange(bucket string) (string, string) {
	return b.prefix + bucket + "/", b.prefix + bucket + "0"
}

func (b *etcdBackend) view(fn func(kvTx) error) error {
	tx := b.begin(true)
	err := fn(tx)
	if tx.err != nil {
		return tx.err
	}
	return err
}

func (b *etcdBackend) update(fn func(kvTx) error) error {
	for attempt := 1; ; attempt++ {
		tx := b.begin(false)
		err := fn(tx)
		switch {
		case errors.Is(tx.err, rpctypes.ErrCompacted):
			// The snapshot was compacted away under the transaction: run it again.
		case tx.err != nil:
			return tx.err
		case err != nil:
			return err
		default:
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
		}
		if attempt == etcdMaxAttempts {
			return fmt.Errorf("store: a transaction met a conflicting write %d times in a row; try again", attempt)
		}
		// Back off a little, with jitter, so contending replicas do not collide again.
		time.Sleep(time.Duration(rand.N(min(attempt, 20))+1) * time.Millisecond)
	}
}

func (b *etcdBackend) begin(readOnly bool) *etcdTx {
	return &etcdTx{b: b, readOnly: readOnly, reads: map[string]int64{}, values: map[string][]byte{},
		scanned: map[string]bool{}, gens: map[string]int64{}, writes: map[string]*[]byte{}}
}

// etcdTx is one etcd transaction: reads at one revision, writes buffered until commit.
type etcdTx struct {
	b        *etcdBackend
	readOnly bool
	// rev is the revision every read is made at; 0 until the first read.
	rev int64
	// reads holds the mod revision (0: missing) of every key read by get, values its value.
	reads  map[string]int64
	values map[string][]byte
	// scanned are the buckets a cursor walked; gens their generation key's mod revision.
	scanned map[string]bool
	gens    map[string]int64
	// writes holds the value of every key written (nil: deleted), wrote its buckets.
	writes map[string]*[]byte
	wrote  []string
	hooks  []func()
	// err is the first failed read: the transaction commits nothing and returns it.
	err error
}

// rangeAt reads [key, end) at the transaction's revision; opts add to it.
func (t *etcdTx) rangeAt(key, end string, opts ...clientv3.OpOption) *clientv3.GetResponse {
	if t.err != nil {
		return nil
	}
	if end != "" {
		opts = append(opts, clientv3.WithRange(end))
	}
	ctx, cancel := t.b.rpc()
	defer cancel()
	var resp *clientv3.GetResponse
	var err error
	if t.rev != 0 {
		// The revision is one the cluster agreed on, and what it holds never changes: any
		// member that has applied it answers alone (serializable), with no round of the
		// cluster; one that is behind says so, and the cluster answers.
		opts = append(opts, clientv3.WithRev(t.rev))
		resp, err = t.b.cli.Get(ctx, key, append(opts, clientv3.WithSerializable())...)
		if errors.Is(err, rpctypes.ErrFutureRev) {
			resp, err = t.b.cli.Get(ctx, key, opts...)
		}
	} else {
		resp, err = t.b.cli.Get(ctx, key, opts...)
	}
	if err != nil {
		t.err = proto.Errorf(proto.Unavailable, "the store's etcd cluster did not answer a read (%w): nothing was written; try again once a majority of its members answer", err)
		return nil
	}
	if t.rev == 0 {
		t.rev = resp.Header.Revision
	}
	return resp
}

func (t *etcdTx) get(bucket string, key []byte) []byte {
	full := t.b.recKey(bucket, key)
	if v, ok := t.writes[full]; ok {
		if v == nil || len(*v) == 0 {
			return nil
		}
		return *v
	}
	if v, ok := t.values[full]; ok {
		return v
	}
	resp := t.rangeAt(full, "")
	if resp == nil {
		return nil
	}
	// An empty value reads as nil, as bbolt reads it.
	var v []byte
	t.reads[full] = 0
	if len(resp.Kvs) == 1 {
		if len(resp.Kvs[0].Value) > 0 {
			v = resp.Kvs[0].Value
		}
		t.reads[full] = resp.Kvs[0].ModRevision
	}
	t.values[full] = v
	return v
}

func (t *etcdTx) put(bucket string, key, value []byte) error {
	if t.readOnly {
		return errors.New("store: a write in a read-only transaction")
	}
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	t.writes[t.b.recKey(bucket, key)] = &v
	t.markWrote(bucket)
	return nil
}

func (t *etcdTx) del(bucket string, key []byte) error {
	if t.readOnly {
		return errors.New("store: a write in a read-only transaction")
	}
	t.writes[t.b.recKey(bucket, key)] = nil
	t.markWrote(bucket)
	return nil
}

func (t *etcdTx) markWrote(bucket string) {
	if !slices.Contains(t.wrote, bucket) {
		t.wrote = append(t.wrote, bucket)
	}
}

func (t *etcdTx) onCommit(fn func()) { t.hooks = append(t.hooks, fn) }

// scan records that bucket was walked: the commit then requires that nothing in it
// changed, since any write to it bumps its generation key. A View commits nothing, so
// it need not read the generation.
func (t *etcdTx) scan(bucket string) {
	if t.readOnly || t.scanned[bucket] {
		return
	}
	t.scanned[bucket] = true
	t.readGen(bucket)
}

func (t *etcdTx) readGen(bucket string) {
	if _, ok := t.gens[bucket]; ok {
		return
	}
	if resp := t.rangeAt(t.b.genKey(bucket), ""); resp != nil {
		t.gens[bucket] = 0
		if len(resp.Kvs) == 1 {
			t.gens[bucket] = resp.Kvs[0].ModRevision
		}
	}
}

func (t *etcdTx) buckets() []string {
	seen := map[string]bool{}
	from, end := t.b.prefix, clientv3.GetPrefixRangeEnd(t.b.prefix)
	for {
		resp := t.rangeAt(from, end, clientv3.WithLimit(1), clientv3.WithKeysOnly())
		if resp == nil || len(resp.Kvs) == 0 {
			break
		}
		rest := string(resp.Kvs[0].Key[len(t.b.prefix):])
		if name, _, rec := strings.Cut(rest, "/"); rec {
			seen[name], from = true, t.b.prefix+name+"0"
		} else {
			seen[name], from = true, string(resp.Kvs[0].Key)+"\x00"
		}
	}
	for full, v := range t.writes {
		if name, _, ok := strings.Cut(full[len(t.b.prefix):], "/"); ok && v != nil {
			seen[name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
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
	if t.err != nil {
		return false, t.err
	}
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
	ops, err := nestOps(ops, len(cmps))
	if err != nil {
		return false, err
	}
	ctx, cancel := t.b.rpc()
	defer cancel()
	resp, err := t.b.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	switch {
	case errors.Is(err, rpctypes.ErrRequestTooLarge) || status.Code(err) == codes.ResourceExhausted:
		return false, fmt.Errorf("%w: it writes %d bytes of keys and values, more than the cluster's --max-request-bytes takes (1.5 MiB by default)", errTooLarge, size)
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return false, fmt.Errorf("%w: the cluster's --max-txn-ops is below etcd's default %d, which the store needs", errTooLarge, etcdMaxTxnOps)
	case err != nil:
		return false, proto.Errorf(proto.Unavailable, "the store's etcd cluster did not confirm the commit (%w): the write may have been made or not; read it back before trying again", err)
	}
	return resp.Succeeded, nil
}

// compares are the conditions of the commit: every key read and every scanned bucket's
// generation as they were at the transaction's revision. When the keys read would be
// more compares than etcd takes, each of their buckets' generation stands for them
// (coarser: a write to another key of the bucket then also conflicts).
func (t *etcdTx) compares() []clientv3.Cmp {
	keyed := 0
	for full := range t.reads {
		if !t.scanned[t.bucketOf(full)] {
			keyed++
		}
	}
	if keyed+len(t.scanned) > etcdMaxTxnOps {
		for full := range t.reads {
			t.scan(t.bucketOf(full))
		}
		clear(t.reads)
	}
	var cmps []clientv3.Cmp
	for full, rev := range t.reads {
		if !t.scanned[t.bucketOf(full)] {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(full), "=", rev))
		}
	}
	for bucket := range t.scanned {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(t.b.genKey(bucket)), "=", t.gens[bucket]))
	}
	return cmps
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
	t.scan(bucket)
	start, end := t.b.bucketRange(bucket)
	return &etcdCursor{t: t, bucket: bucket, start: start, end: end}
}

// etcdCursor walks a bucket at the transaction's revision, with the transaction's own
// writes laid over it. It keeps one page of stored keys read ahead.
type etcdCursor struct {
	t          *etcdTx
	bucket     string
	start, end string
	// key is where the cursor stands (full key), "" when off either end.
	key string
	// page holds every stored key of [pageFrom, pageTo) (pageTo "" : to the bucket's end).
	page             []storedKV
	pageFrom, pageTo string
}

type storedKV struct {
	key   string
	value []byte
}

func (c *etcdCursor) First() ([]byte, []byte)        { return c.move(c.start, true) }
func (c *etcdCursor) Last() ([]byte, []byte)         { return c.move(c.end, false) }
func (c *etcdCursor) Seek(k []byte) ([]byte, []byte) { return c.move(c.start+string(k), true) }

func (c *etcdCursor) Next() ([]byte, []byte) {
	if c.key == "" {
		return nil, nil
	}
	return c.move(c.key+"\x00", true)
}

func (c *etcdCursor) Prev() ([]byte, []byte) {
	if c.key == "" {
		return nil, nil
	}
	return c.move(c.key, false)
}

// move lands on the first key at or after from (forward) or the last key before from
// (backward), among the stored keys not deleted by the transaction and the keys it put.
func (c *etcdCursor) move(from string, forward bool) ([]byte, []byte) {
	c.key = ""
	stored, ok := c.stored(from, forward)
	for ok {
		if w, written := c.t.writes[stored.key]; !written || w != nil {
			break
		}
		// Deleted in this transaction: look past it.
		if forward {
			stored, ok = c.stored(stored.key+"\x00", true)
		} else {
			stored, ok = c.stored(stored.key, false)
		}
	}
	// The transaction's own puts between from and the stored key found.
	best, found := stored.key, ok
	for full, v := range c.t.writes {
		if v == nil || full < c.start || full >= c.end {
			continue
		}
		if forward && full >= from && (!found || full < best) || !forward && full < from && (!found || full > best) {
			best, found = full, true
		}
	}
	if !found || c.t.err != nil {
		return nil, nil
	}
	c.key = best
	if v, ok := c.t.writes[best]; ok {
		return []byte(best[len(c.start):]), *v
	}
	return []byte(best[len(c.start):]), stored.value
}

// stored is the first stored key at or after from (forward) or the last before it.
func (c *etcdCursor) stored(from string, forward bool) (storedKV, bool) {
	if !forward {
		if from > c.end {
			from = c.end
		}
		resp := c.t.rangeAt(c.start, from, clientv3.WithLimit(1), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
		if resp == nil || len(resp.Kvs) == 0 {
			return storedKV{}, false
		}
		return storedKV{string(resp.Kvs[0].Key), resp.Kvs[0].Value}, true
	}
	if from < c.start {
		from = c.start
	}
	if c.page == nil || from < c.pageFrom || c.pageTo != "" && from >= c.pageTo {
		limit := int64(etcdPage)
		if c.page == nil {
			limit = etcdFirstPage
		}
		resp := c.t.rangeAt(from, c.end, clientv3.WithLimit(limit))
		if resp == nil {
			return storedKV{}, false
		}
		c.page, c.pageFrom, c.pageTo = make([]storedKV, 0, len(resp.Kvs)), from, ""
		for _, kv := range resp.Kvs {
			c.page = append(c.page, storedKV{string(kv.Key), kv.Value})
		}
		if resp.More {
			c.pageTo = c.page[len(c.page)-1].key + "\x00"
		}
	}
	i := sort.Search(len(c.page), func(i int) bool { return c.page[i].key >= from })
	if i == len(c.page) {
		return storedKV{}, false
	}
	return c.page[i], true
}

// remoteCommit is what one commit of another replica wrote, as the watch saw it.
type remoteCommit struct {
	// buckets are the buckets it wrote.
	buckets []string
	// puts are the records it put (not those it deleted).
	puts []remotePut
	// lost says events were lost (the watch fell behind a compaction): treat every
	// bucket as written and every record as put.
	lost bool
}

type remotePut struct {
	bucket     string
	key, value []byte
}

// startWatch calls fn with every commit of other replicas after the backend opened, in
// commit order, until close. When the watch breaks it resumes after the last revision
// it handled, so a commit is handed to fn at least once.
func (b *etcdBackend) startWatch(fn func(remoteCommit)) {
	b.watching.Add(1)
	go func() {
		defer b.watching.Done()
		next := b.startRev + 1
		for b.ctx.Err() == nil {
			ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(b.ctx))
			for resp := range b.cli.Watch(ctx, b.prefix, clientv3.WithPrefix(), clientv3.WithRev(next)) {
				if resp.CompactRevision != 0 {
					fn(remoteCommit{lost: true})
					next = resp.CompactRevision
					break
				}
				if resp.Err() != nil {
					break
				}
				next = b.handleEvents(resp.Events, next, fn)
			}
			cancel()
			select {
			case <-b.ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// handleEvents hands fn the commits of events (of other replicas), grouped by revision,
// and returns the revision to watch from next.
func (b *etcdBackend) handleEvents(events []*clientv3.Event, next int64, fn func(remoteCommit)) int64 {
	for len(events) > 0 {
		rev := events[0].Kv.ModRevision
		n := 1
		for n < len(events) && events[n].Kv.ModRevision == rev {
			n++
		}
		if c, own := b.decodeCommit(events[:n]); !own {
			fn(c)
		}
		events, next = events[n:], rev+1
	}
	return next
}

func (b *etcdBackend) decodeCommit(events []*clientv3.Event) (remoteCommit, bool) {
	var c remoteCommit
	for _, ev := range events {
		rest, ok := strings.CutPrefix(string(ev.Kv.Key), b.prefix)
		if !ok {
			continue
		}
		name, key, rec := strings.Cut(rest, "/")
		switch {
		case !rec && ev.Type == clientv3.EventTypePut:
			if bytes.Equal(ev.Kv.Value, b.id) {
				return c, true
			}
			c.buckets = append(c.buckets, name)
		case rec && ev.Type == clientv3.EventTypePut:
			c.puts = append(c.puts, remotePut{bucket: name, key: []byte(key), value: ev.Kv.Value})
		}
	}
	return c, false
}

// check reports the keys under the prefix outside the layout, and buckets holding
// records without the generation key every write makes.
func (b *etcdBackend) check() []error {
	var errs []error
	tx := b.begin(true)
	for _, name := range tx.buckets() {
		if tx.readGen(name); tx.err == nil && tx.gens[name] == 0 {
			errs = append(errs, fmt.Errorf("store: etcd bucket %s holds records but no generation key %q", name, b.genKey(name)))
		}
		c := tx.cursor(name)
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) == 0 {
				errs = append(errs, fmt.Errorf("store: etcd key %q has an empty record key", b.recKey(name, k)))
			}
		}
	}
	return append(errs, tx.err)
}
