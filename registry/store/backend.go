package store

// backend is the key-value storage under a Store: named buckets of keys in byte order,
// transactions that are serializable (a read-write transaction sees and commits as if
// it ran alone), and hooks run after a commit. bboltBackend (one file, the default) and
// etcdBackend (a cluster shared by replicas) implement it; everything above it, every
// invariant of the write paths included, is the same code on both.
type backend interface {
	// update runs fn in a read-write transaction committed only when fn returns nil.
	// fn may run more than once (the backend retries it after a conflict).
	update(fn func(kvTx) error) error
	// batch is update for many concurrent small writers, which the backend may coalesce.
	batch(fn func(kvTx) error) error
	// view runs fn in a read-only transaction over one consistent snapshot.
	view(fn func(kvTx) error) error
	// fresh marks this moment: a viewAt its answer sees every commit acknowledged before
	// fresh was called (on bbolt every view does; etcd: a barrier round).
	fresh() (int64, error)
	// viewAt is view on a snapshot at least as recent as fresh's answer floor.
	viewAt(floor int64, fn func(kvTx) error) error
	// updateAt is update reading a snapshot at least as recent as fresh's answer floor,
	// with no barrier of its own (etcd): the commit compares what fn read.
	updateAt(floor int64, fn func(kvTx) error) error
	// check reports the backend's own problems (bbolt: its pages and free list).
	check() []error
	close() error
}

// kvTx is one transaction of a backend. Keys and values a read returns are valid only
// during the transaction and must not be changed. Reads do not fail: bbolt reads its
// file's pages, etcd its replica's mirror (a backend that cannot give a transaction a
// snapshot, such as an etcd replica that cannot reach the cluster, fails the call before
// the transaction's function runs).
type kvTx interface {
	// get returns the value at key, nil when the key or bucket is missing.
	get(bucket string, key []byte) []byte
	// put writes value at key, making the bucket on first use.
	put(bucket string, key, value []byte) error
	// del removes key; a missing key or bucket is not an error.
	del(bucket string, key []byte) error
	// cursor walks bucket in key order; a missing bucket walks nothing.
	cursor(bucket string) cursor
	// buckets lists the buckets that hold keys (on etcd: or a generation key), in name order.
	buckets() []string
	// onCommit runs fn after the transaction committed (never when it did not).
	onCommit(fn func())
}

// cursor walks the keys of one bucket, as bbolt's cursor does: each move returns the
// key and value it lands on, a nil key past either end (or after a failed read).
type cursor interface {
	First() (key, value []byte)
	Last() (key, value []byte)
	Seek(seek []byte) (key, value []byte)
	Next() (key, value []byte)
	Prev() (key, value []byte)
}

// emptyCursor walks a missing bucket.
type emptyCursor struct{}

func (emptyCursor) First() ([]byte, []byte)      { return nil, nil }
func (emptyCursor) Last() ([]byte, []byte)       { return nil, nil }
func (emptyCursor) Seek([]byte) ([]byte, []byte) { return nil, nil }
func (emptyCursor) Next() ([]byte, []byte)       { return nil, nil }
func (emptyCursor) Prev() ([]byte, []byte)       { return nil, nil }
