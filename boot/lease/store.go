// Package lease keeps the addresses the authoritative DHCP server hands out, in a bbolt
// file so that they survive a restart. Writes are group-committed: exchanges that arrive
// while one transaction is being written wait together and share the next transaction's
// fsync, and Put returns only once its lease is on disk, so no DHCPACK ever announces a
// lease a crash could forget. A Pool serves the clients its Policy knows first: the
// others hold at most a share of the range, and a known client takes one of their
// addresses when none is free.
package lease

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/better-compute/better-compute/fsutil"
	"go.etcd.io/bbolt"
)

// Lease is one address bound to one client until Expiry.
type Lease struct {
	// MAC is the client's hardware address, lowercase with colons (or Declined).
	MAC string `json:"mac"`
	// IP is the leased address.
	IP netip.Addr `json:"ip"`
	// Expiry is when the lease ends unless the client renews it.
	Expiry time.Time `json:"expiry"`
	// Known says the site knew the client when it was granted or last renewed: a lease
	// of a client not known counts against their share of the range, and a known
	// client may take its address (Policy). A lease stored without it is not known.
	Known bool `json:"known,omitempty"`
}

// Declined is the MAC of the lease that holds an address a client declined (it answered
// ARP for someone else), or at which a host answered the server's check before it was
// offered (Pool.InUse), so that it is not offered again until the lease ends.
const Declined = "declined"

// maxBatch bounds how many writes share one transaction.
const maxBatch = 512

var bucket = []byte("leases")

// record is the envelope a lease is stored in.
type record struct {
	Schema int   `json:"schema"`
	Record Lease `json:"record"`
}

// schema is the version of record this package writes and reads.
const schema = 1

// encode is l as it is stored.
func encode(l Lease) ([]byte, error) { return json.Marshal(record{Schema: schema, Record: l}) }

// decode reads the lease stored under key k: a record of this schema with a MAC, whose
// address is an IPv4 address, the key it is stored under.
func decode(k, v []byte) (Lease, error) {
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return Lease{}, err
	}
	l := r.Record
	switch {
	case r.Schema != schema:
		return Lease{}, fmt.Errorf("schema %d, want %d", r.Schema, schema)
	case !l.IP.Is4() || !bytes.Equal(l.IP.AsSlice(), k):
		return Lease{}, fmt.Errorf("address %q is not the IPv4 address it is stored under", l.IP)
	case l.MAC == "":
		return Lease{}, errors.New("no MAC")
	}
	return l, nil
}

// Errors of the store.
var (
	// ErrClosed is returned by writes after Close.
	ErrClosed = errors.New("lease: store closed")
	// ErrCorrupt is returned for a lease file holding a record that is not a lease.
	ErrCorrupt = errors.New("lease: damaged lease file")
)

// Store is the lease file.
type Store struct {
	path    string
	db      *bbolt.DB
	writes  chan write
	mu      sync.RWMutex // held for reading by writers in flight, for writing by Close
	closed  bool
	stopped chan struct{}
	stats   struct{ commits, records atomic.Uint64 }
}

// write is one lease to store, and where its result goes.
type write struct {
	lease Lease
	done  chan error
}

// Open opens (or makes) the lease file at path. One process at a time: a second Open of
// the same file waits a second and then fails. The file's directory is fsynced before it
// returns: bbolt fsyncs the file, not the name a new one has in its directory, and a
// power loss that took the name would take every lease acknowledged since.
func Open(path string) (*Store, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("open lease file %s: %w", path, err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		db.Close()
		return nil, err
	}
	if err := fsutil.SyncDir(filepath.Dir(path)); err != nil {
		db.Close()
		return nil, fmt.Errorf("open lease file %s: %w", path, err)
	}
	s := &Store{path: path, db: db, writes: make(chan write, maxBatch), stopped: make(chan struct{})}
	go s.commitLoop()
	return s, nil
}

// All returns every stored lease, expired ones included. A record it cannot read fails
// it with ErrCorrupt, naming the file and the record's key.
func (s *Store) All() ([]Lease, error) {
	var out []Lease
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			l, err := decode(k, v)
			if err != nil {
				return fmt.Errorf("%w: %s: lease %x: %v (move the file aside to start with no leases: the clients then ask for their addresses again)", ErrCorrupt, s.path, k, err)
			}
			out = append(out, l)
			return nil
		})
	})
	return out, err
}

// Put stores each lease, replacing any lease of the same address, and returns once all
// of them are durable.
func (s *Store) Put(ls ...Lease) error {
	ws := make([]write, len(ls))
	for i, l := range ls {
		ws[i] = write{lease: l}
	}
	return s.submit(ws...)
}

// submit queues the writes and waits for all of them; the first error wins.
func (s *Store) submit(ws ...write) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	for i := range ws {
		ws[i].done = make(chan error, 1)
		s.writes <- ws[i]
	}
	s.mu.RUnlock()
	var first error
	for _, w := range ws {
		if err := <-w.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// commitLoop writes whatever writes are waiting in one transaction, then tells each of
// them the result. While a transaction's fsync runs, new writes queue up for the next.
func (s *Store) commitLoop() {
	defer close(s.stopped)
	for first := range s.writes {
		batch := []write{first}
	drain:
		for len(batch) < maxBatch {
			select {
			case w, ok := <-s.writes:
				if !ok {
					break drain
				}
				batch = append(batch, w)
			default:
				break drain
			}
		}
		err := s.db.Update(func(tx *bbolt.Tx) error {
			b := tx.Bucket(bucket)
			for _, w := range batch {
				v, err := encode(w.lease)
				if err != nil {
					return err
				}
				if err := b.Put(w.lease.IP.AsSlice(), v); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			s.stats.commits.Add(1)
			s.stats.records.Add(uint64(len(batch)))
		}
		for _, w := range batch {
			w.done <- err
		}
	}
}

// Close waits for writes in flight and closes the file.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.writes)
	s.mu.Unlock()
	<-s.stopped
	return s.db.Close()
}
