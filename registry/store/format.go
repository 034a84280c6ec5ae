package store

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/better-compute/better-compute/proto"
)

// Format is the store format this release reads and writes (docs/store.md, "The store's
// format"). A release raises it when it changes a stored shape in a way an earlier
// release cannot read: a record an earlier release fails to decode or decodes wrong, a
// bucket whose entries change what records mean (an earlier release that does not read
// them misreads the records). A change an earlier release reads as it should keeps it.
// A store of a newer format is refused at open (INVALID_CONFIG), a running replica whose
// store another replica raised past it stops (Store.Outdated), and a store of an older
// format is raised to this one at open.
//
// What each format added:
//
//	0  no format key: the stores of the releases before the format was kept. Those
//	   releases never read the key, so nothing stops them on a store of a later format.
//	1  the format key (store_format/format); runs that refer to their profile version
//	   rather than holding its document and rendered steps; the profiles_used and
//	   profiles_deleted buckets (a version used or deleted since says so there, not in
//	   its record); NodeSpecs whose host section is their node's, stored as
//	   "host":"node"; answered relayed commands kept a day (agents.CommandTTL), and
//	   kept as a digest once their run records them (RecordAgentCommands); runs
//	   recording their node's identity epoch (identityEpoch).
//	2  the agent-commands-by-expiry index (agentcommandexpiry.go), which expiry reads
//	   rather than every command: an earlier release writes commands without their
//	   entry, which would never expire. Raising a store to 2 indexes its commands
//	   (indexAgentCommands). And on etcd, the deletion generations
//	   (P/~deleted/<bucket>): every transaction that deletes from a bucket writes its
//	   own, and a transaction whose cursor walked the bucket compares it rather than
//	   the bucket's generation. A replica of format 1 deletes without it, so a replica
//	   of format 2 would miss its deletions: it must stop first.
//	3  the join_tokens_by_node index (tokens.go), which the deletion of a node's
//	   unused join tokens reads rather than every token: an earlier release mints
//	   tokens without their entry, which a revocation would leave working. Raising a
//	   store to 3 indexes its tokens (indexJoinTokens).
//	4  the tenant_counts bucket (tenantcounts.go), which a creation of a counted kind
//	   reads rather than every object of its tenant: an earlier release creates and
//	   deletes without it, which would leave a count wrong and a tenant's bound refusing
//	   too early or too late. Raising a store to 4 counts its objects (countTenants).
//	5  the image_digests keys digest NUL tenant NUL id (imagedigests.go), which a
//	   registration reads for its own tenant's images of the digest rather than every
//	   tenant's: an earlier release writes digest NUL id, which a registration would not
//	   count toward its tenant's bound; and tenant_counts counting each tenant's
//	   credentials, pools and nodes too: a replica of format 4 creates them, and prunes
//	   credentials, without counting, which would leave those counts wrong while it runs
//	   beside one of format 5 (the count every open makes corrects what a store of format
//	   4 left, not what such a replica writes after it). Raising a store to 5 rewrites
//	   its keys (indexImageDigests) and counts its objects again (countTenants), and
//	   stops the replicas of format 4 first.
//	6  two changes in one raise. First, the site_locations bucket (locations.go): a
//	   site's location of an artifact is stored once for its site, digest and source,
//	   and each image of that digest and source is located by it, rather than once for
//	   each image in image_locations, so that a site's report writes as many keys for a
//	   digest whatever number of images name it (past 4,091, one etcd transaction did
//	   not take them). A replica of format 5 reads and writes image_locations alone: it
//	   would locate no image after the raise, and its reports' writes would be lost.
//	   Raising a store to 6 moves its locations (moveImageLocations). Second, profile
//	   versions' references (format6_profiles.go): the profiles_refs bucket, the runs and
//	   nodes that refer to each stored profile version, which the prune of a deleted
//	   version reads rather than every run and node, and the version's key in the values
//	   of workflows_by_end, by which a run's prune drops its entry: a replica of format 5
//	   creates and prunes runs and deploys nodes without them, which would let a prune
//	   delete a version a run still reads. Raising a store to 6 writes them
//	   (indexProfileRefs). The raise stops the replicas of format 5 first.
const Format = 6

// formatExpiryIndex is the format that added bucketAgentCommandsByExpiry.
const formatExpiryIndex = 2

// formatTokenIndex is the format that added bucketJoinTokensByNode.
const formatTokenIndex = 3

// The format key: bucketFormat/formatKey holds the store's format in decimal digits
// (etcd: P/store_format/format). A store without it is of format 0.
const bucketFormat = "store_format"

var formatKey = []byte("format")

// FormatError is a store this release cannot read: one of a format newer than Format,
// or one whose format key holds what no release writes.
type FormatError struct {
	// Stored is the store's format, Raw the key's value when it is not a format.
	Stored int
	Raw    string
}

func (e *FormatError) Error() string {
	if e.Raw != "" {
		return fmt.Sprintf("the store's format key holds %s, which no release of the registry writes: this is not a registry's store, or it is damaged; restore the backup of the store (docs/store.md#the-stores-format)", proto.Quote(e.Raw))
	}
	return fmt.Sprintf("the store is of format %d, written by a newer release of the registry, and this release reads formats up to %d: run the newer release (on every replica), or restore the backup of the store taken before the upgrade to go back to this one (docs/store.md#the-stores-format)", e.Stored, Format)
}

// parseFormat reads a format key's value: 0 when there is none, else decimal digits of
// a format from 1 on, as formatValue writes them; anything else is a FormatError.
func parseFormat(raw []byte) (int, error) {
	if len(raw) == 0 {
		return 0, nil
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < 1 || strconv.Itoa(n) != string(raw) {
		return 0, &FormatError{Raw: string(raw)}
	}
	return n, nil
}

func formatValue(format int) []byte { return []byte(strconv.Itoa(format)) }

// formatReadable is nil when this release reads a store whose format key holds raw, else the
// FormatError saying why not.
func formatReadable(raw []byte) error {
	f, err := parseFormat(raw)
	if err == nil && f > Format {
		err = &FormatError{Stored: f}
	}
	return err
}

// openFormat checks the format of s, just opened, and raises an older one to Format
// (unless read-only), after bringing what the formats since added up to its records
// (indexAgentCommands): in one transaction that reads the key, does the last of that
// (finalExpiryIndex) and writes the key only when it is older, so replicas opening at
// once write it once and a store of this format is not written. A store this release
// cannot read is INVALID_CONFIG.
func (s *Store) openFormat(readOnly bool) error {
	err := s.raiseFormat(readOnly)
	if fe, ok := errors.AsType[*FormatError](err); ok {
		return proto.Errorf(proto.InvalidConfig, "%w", fe)
	}
	return err
}

// raiseFormat is openFormat but for the FormatError's code.
func (s *Store) raiseFormat(readOnly bool) error {
	var stored int
	read := func(tx kvTx) (err error) {
		raw := tx.get(bucketFormat, formatKey)
		if err := formatReadable(raw); err != nil {
			return err
		}
		stored, err = parseFormat(raw)
		return err
	}
	if err := s.kv.view(read); err != nil || readOnly || stored == Format {
		return err
	}
	for {
		if stored < formatExpiryIndex {
			if err := s.indexAgentCommands(); err != nil {
				return fmt.Errorf("store: indexing the relayed commands by expiry: %w", err)
			}
		}
		if stored < formatTokenIndex {
			if err := s.indexJoinTokens(); err != nil {
				return fmt.Errorf("store: indexing the join tokens by node: %w", err)
			}
		}
		if stored < formatMoreCounts {
			if err := s.countTenants(); err != nil {
				return fmt.Errorf("store: counting each tenant's objects: %w", err)
			}
		}
		if stored < formatDigestTenants {
			if err := s.indexImageDigests(); err != nil {
				return fmt.Errorf("store: indexing the images of each digest by tenant: %w", err)
			}
		}
		if stored < formatSiteLocations {
			if err := s.moveImageLocations(); err != nil {
				return fmt.Errorf("store: moving the image locations to one a site, digest and source: %w", err)
			}
		}
		if stored < formatProfileRefs {
			if err := s.indexProfileRefs(); err != nil {
				return fmt.Errorf("store: indexing the references of the profile versions: %w", err)
			}
		}
		err := s.kv.update(func(tx kvTx) error {
			if err := read(tx); err != nil || stored == Format {
				return err
			}
			if stored < formatExpiryIndex {
				if err := s.tx(tx).finalExpiryIndex(); err != nil {
					return err
				}
			}
			if stored < formatTokenIndex {
				if err := s.tx(tx).finalTokenIndex(); err != nil {
					return err
				}
			}
			if stored < formatMoreCounts {
				if err := s.tx(tx).finalTenantCounts(); err != nil {
					return err
				}
			}
			if stored < formatDigestTenants {
				if err := s.tx(tx).finalImageDigests(); err != nil {
					return err
				}
			}
			if stored < formatSiteLocations {
				if err := s.tx(tx).finalImageLocations(); err != nil {
					return err
				}
			}
			if stored < formatProfileRefs {
				if err := s.tx(tx).finalProfileRefs(); err != nil {
					return err
				}
			}
			return tx.put(bucketFormat, formatKey, formatValue(Format))
		})
		if err != errMoreToIndex {
			return err
		}
	}
}

// outdated is closed when the store's format moved, while it was open, past what this
// release reads: another replica of a newer release raised it (etcd). err says so.
type outdated struct {
	once sync.Once
	done chan struct{}
	err  error
}

func newOutdated() *outdated { return &outdated{done: make(chan struct{})} }

// mark records err (a FormatError) as why the store is outdated, the first time.
func (o *outdated) mark(err error) {
	o.once.Do(func() {
		o.err = proto.Errorf(proto.InvalidConfig, "another replica changed the store's format while this one ran: %w; this replica wrote nothing since and stops", err)
		close(o.done)
	})
}

// Outdated is closed when another replica raised the store's format past Format while
// this store was open (etcd; a bbolt file is one process's, so never there). From the
// moment this replica's copy of the store holds the new format, every transaction fails,
// and none that began before commits: the replica cannot read what the newer release
// writes, and must stop (a supervisor starts it again with the newer release).
func (s *Store) Outdated() <-chan struct{} { return s.outdated.done }

// OutdatedErr says why Outdated was closed (INVALID_CONFIG, naming the formats and what to
// do); nil while it is not.
func (s *Store) OutdatedErr() error {
	select {
	case <-s.outdated.done:
		return s.outdated.err
	default:
		return nil
	}
}
