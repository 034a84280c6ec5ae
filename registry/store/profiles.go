package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Profile visibilities.
const (
	Private = "private"
	Public  = "public"
)

// ProfileRecord is one stored version of a profile. The document is kept as given
// (after it passed profile.Define); the rest is the row's own state.
type ProfileRecord struct {
	Tenant     string          `json:"tenant"`
	ID         string          `json:"id"`
	Version    int             `json:"version"`
	Visibility string          `json:"visibility"`
	Document   json.RawMessage `json:"document"`
	// Rev is the row's version: 1 when created, +1 on every update. `--if-version`
	// guards it.
	Rev int `json:"rev"`
	// Used is set the first time a workflow runs this version; from then on it is
	// immutable. MarkProfileUsed keeps it as an entry of its own (profiles_used); a record
	// marked before holds it itself, and a record rewritten since holds it too.
	Used bool `json:"used"`
	// Deleted hides the version from lookups and lists; workflows that run it keep it.
	// DeleteProfile keeps it as an entry of its own (profiles_deleted), as Used; a record
	// deleted before holds it itself. Only a used version is kept so, while a run or a
	// node refers to it (PruneDeletedProfiles): an unused one's record goes with its
	// delete, its entry in profiles_deleted staying alone.
	Deleted   bool      `json:"deleted,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

const (
	bucketProfiles = "profiles"
	// bucketPublicProfiles indexes public versions: id, version, tenant -> nothing.
	bucketPublicProfiles = "profiles_public"
	// bucketUsedProfiles marks the versions a workflow has used: the version's key -> when
	// it was first used (RFC 3339, UTC; an entry is never empty, which reads as missing).
	// An entry of its own, so that a deploy marks its version used with a few
	// bytes rather than the version's whole record again beside its run: with a document
	// of 1 MiB, that was more than etcd takes in one request.
	bucketUsedProfiles = "profiles_used"
	// bucketDeletedProfiles marks the versions profiles delete hid, in the same way: the
	// version's key -> when it was deleted. A delete of every version of a profile writes
	// a mark for each, in one transaction, rather than each version's whole record: two
	// versions of 1 MiB were more than etcd takes in one request. The mark of a version
	// no workflow used stands alone, its record deleted: it keeps the number from being
	// given again.
	bucketDeletedProfiles = "profiles_deleted"
)

func profileKey(tenant, id string, version int) []byte {
	k := fmt.Appendf(nil, "%s\x00%s\x00", tenant, id)
	return binary.BigEndian.AppendUint64(k, uint64(version))
}

func publicKey(id string, version int, tenant string) []byte {
	k := fmt.Appendf(nil, "%s\x00", id)
	k = binary.BigEndian.AppendUint64(k, uint64(version))
	return fmt.Appendf(k, "\x00%s", tenant)
}

// parsePublicKey is publicKey's inverse; ok is false for a key publicKey does not make.
func parsePublicKey(k []byte) (id string, version int, tenant string, ok bool) {
	i := bytes.IndexByte(k, 0)
	if i < 0 || len(k) < i+10 || k[i+9] != 0 {
		return "", 0, "", false
	}
	return string(k[:i]), int(binary.BigEndian.Uint64(k[i+1 : i+9])), string(k[i+10:]), true
}

// CreateProfile stores a new version. An existing version of the tenant's profile, and
// one deleted (its record kept or not), is CONFLICT: version numbers are never reused. A
// version past the tenant's bound (TenantBounds.ProfileVersions, the versions whose
// records are stored: deleted ones a workflow used counted) is INVALID_STATE, reason
// quota, at version.
func (t *Tx) CreateProfile(rec ProfileRecord) (ProfileRecord, error) {
	key := profileKey(rec.Tenant, rec.ID, rec.Version)
	if t.getRaw(bucketProfiles, key) != nil {
		return rec, proto.Errorf(proto.Conflict, "profile %s@%d exists already in tenant %s: bump the version to store a changed document", rec.ID, rec.Version, rec.Tenant).WithPath("version")
	}
	if t.getRaw(bucketDeletedProfiles, key) != nil {
		return rec, proto.Errorf(proto.Conflict, "profile %s@%d of tenant %s was deleted, and a version's number is never given again: bump the version", rec.ID, rec.Version, rec.Tenant).WithPath("version")
	}
	if rec.Visibility == "" {
		rec.Visibility = Private
	}
	if rec.Visibility != Private && rec.Visibility != Public {
		return rec, proto.Errorf(proto.InvalidInput, "visibility must be private or public, not %q", rec.Visibility).WithPath("visibility")
	}
	if err := t.admit(countProfileVersions, rec.Tenant, "version"); err != nil {
		return rec, err
	}
	rec.Rev, rec.Used, rec.Deleted = 1, false, false
	rec.CreatedAt, rec.UpdatedAt = t.now, t.now
	return rec, t.putProfile(rec)
}

// putProfile writes the row and keeps the public index in step with it.
func (t *Tx) putProfile(rec ProfileRecord) error {
	if err := t.put(bucketProfiles, profileKey(rec.Tenant, rec.ID, rec.Version), rec); err != nil {
		return err
	}
	pk := publicKey(rec.ID, rec.Version, rec.Tenant)
	if rec.Visibility == Public && !rec.Deleted {
		return t.putRaw(bucketPublicProfiles, pk, nil)
	}
	return t.del(bucketPublicProfiles, pk)
}

// Profile returns one version of a tenant's own profile, deleted ones included.
func (t *Tx) Profile(tenant, id string, version int) (ProfileRecord, bool, error) {
	key := profileKey(tenant, id, version)
	raw := t.kv.get(bucketProfiles, key)
	if raw == nil {
		return ProfileRecord{}, false, nil
	}
	rec, err := t.profileRecord(key, raw)
	return rec, true, err
}

// profileRecord decodes the record of the version at key: used when the record says so
// or profiles_used holds the key, deleted likewise with profiles_deleted.
func (t *Tx) profileRecord(key, raw []byte) (ProfileRecord, error) {
	var rec ProfileRecord
	if err := decode(bucketProfiles, key, raw, &rec); err != nil {
		return rec, err
	}
	rec.Used = rec.Used || t.getRaw(bucketUsedProfiles, key) != nil
	rec.Deleted = rec.Deleted || t.getRaw(bucketDeletedProfiles, key) != nil
	return rec, nil
}

// LatestProfile returns the highest version of a tenant's own profile that is not
// deleted.
func (t *Tx) LatestProfile(tenant, id string) (ProfileRecord, bool, error) {
	prefix := fmt.Appendf(nil, "%s\x00%s\x00", tenant, id)
	c := t.kv.cursor(bucketProfiles)
	// Seek past the last version, then walk back over deleted ones.
	k, _ := c.Seek(append(bytes.Clone(prefix), 0xff))
	var v []byte
	if k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev()
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Prev() {
		rec, err := t.profileRecord(k, v)
		if err != nil {
			return rec, false, err
		}
		if !rec.Deleted {
			return rec, true, nil
		}
	}
	return ProfileRecord{}, false, nil
}

// PublicProfile returns a public, undeleted version of owner's profile id: the given
// version, or the highest public one when version is 0. Other tenants reach a profile
// only this way, by naming its owner.
func (t *Tx) PublicProfile(owner, id string, version int) (ProfileRecord, bool, error) {
	prefix := fmt.Appendf(nil, "%s\x00", id)
	if version > 0 {
		prefix = binary.BigEndian.AppendUint64(prefix, uint64(version))
	}
	found := 0
	c := t.kv.cursor(bucketPublicProfiles)
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		// Keys sort by version: a later key of owner has a higher version.
		if kid, v, tenant, ok := parsePublicKey(k); ok && kid == id && tenant == owner {
			found = v
		}
	}
	if found == 0 {
		return ProfileRecord{}, false, nil
	}
	return t.Profile(owner, id, found)
}

// ReplaceProfileDocument replaces an unused version's document. A used version is
// INVALID_STATE; ifRev, when not 0, must equal the row's Rev (else CONFLICT).
func (t *Tx) ReplaceProfileDocument(tenant, id string, version, ifRev int, doc json.RawMessage) (ProfileRecord, error) {
	return t.updateProfile(tenant, id, version, ifRev, func(rec *ProfileRecord) error {
		if rec.Used {
			return proto.Errorf(proto.InvalidState, "profile %s@%d has been used by a workflow and cannot change: create version %d instead", id, version, version+1)
		}
		rec.Document = doc
		return nil
	})
}

// SetProfileVisibility makes a version private or public; allowed on used versions,
// since what runs does not change.
func (t *Tx) SetProfileVisibility(tenant, id string, version, ifRev int, visibility string) (ProfileRecord, error) {
	if visibility != Private && visibility != Public {
		return ProfileRecord{}, proto.Errorf(proto.InvalidInput, "visibility must be private or public, not %q", visibility).WithPath("visibility")
	}
	return t.updateProfile(tenant, id, version, ifRev, func(rec *ProfileRecord) error {
		rec.Visibility = visibility
		return nil
	})
}

// MaxHidden is the most versions DeleteProfile hides in one transaction, which keeps it
// within etcd's bounds (docs/store.md): a mark each, and the public ones' index entries.
const MaxHidden = 1000

// DeleteProfile hides one version (or, when version is 0, every version, lowest first,
// at most MaxHidden of them: a caller told MaxHidden calls again, in a new transaction,
// for the rest) from lookups, lists and new workflows, in tx. It returns the versions it
// hid. It writes each version's entry in profiles_deleted (and drops a public one from
// profiles_public). A used version's record, its rev and its updatedAt, stay as they
// are, for the workflows that ran it, until PruneDeletedProfiles finds nothing refers
// to it; an unused one's, which no run or node names (a run
// marks its version used as it is created), is deleted and frees its place under the
// tenant's bound: before, every deleted version was kept and counted, and a tenant that
// defined and deleted versions reached its bound for good. Before, too, every version
// went in one transaction, two writes each: etcd refused the delete of a profile of
// more than 2,046 versions.
func (t *Tx) DeleteProfile(tenant, id string, version int) ([]int, error) {
	var versions []int
	if version > 0 {
		versions = []int{version}
	} else {
		prefix := fmt.Appendf(nil, "%s\x00%s\x00", tenant, id)
		c := t.kv.cursor(bucketProfiles)
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			versions = append(versions, int(binary.BigEndian.Uint64(k[len(prefix):])))
		}
	}
	var hid []int
	for _, v := range versions {
		if len(hid) == MaxHidden {
			break
		}
		rec, ok, err := t.Profile(tenant, id, v)
		if err != nil {
			return nil, err
		}
		if !ok || rec.Deleted {
			continue
		}
		key := profileKey(tenant, id, v)
		if err := t.putRaw(bucketDeletedProfiles, key, []byte(t.now.UTC().Format(time.RFC3339Nano))); err != nil {
			return nil, err
		}
		if rec.Visibility == Public {
			if err := t.del(bucketPublicProfiles, publicKey(id, v, tenant)); err != nil {
				return nil, err
			}
		}
		if !rec.Used {
			if err := t.del(bucketProfiles, key); err != nil {
				return nil, err
			}
			if err := t.release(countProfileVersions, tenant); err != nil {
				return nil, err
			}
		}
		hid = append(hid, v)
	}
	if len(hid) == 0 {
		return nil, notFound("profile", profileName(id, version))
	}
	return hid, nil
}

// MarkProfileUsed records that a workflow runs this version: it is immutable from now
// on. Marking twice is harmless. It writes the version's entry in profiles_used, not its
// record: the record, and its updatedAt, stay as they are.
func (t *Tx) MarkProfileUsed(tenant, id string, version int) error {
	rec, ok, err := t.Profile(tenant, id, version)
	if err != nil {
		return err
	}
	if !ok {
		return notFound("profile", profileName(id, version))
	}
	if rec.Used {
		return nil
	}
	return t.putRaw(bucketUsedProfiles, profileKey(tenant, id, version), []byte(t.now.UTC().Format(time.RFC3339Nano)))
}

func (t *Tx) updateProfile(tenant, id string, version, ifRev int, change func(*ProfileRecord) error) (ProfileRecord, error) {
	rec, ok, err := t.Profile(tenant, id, version)
	if err != nil {
		return rec, err
	}
	if !ok || rec.Deleted {
		return rec, notFound("profile", profileName(id, version))
	}
	if ifRev != 0 && ifRev != rec.Rev {
		return rec, proto.Errorf(proto.Conflict, "profile %s@%d is at row version %d, not %d: get it again and retry", id, version, rec.Rev, ifRev).WithPath("ifVersion")
	}
	if err := change(&rec); err != nil {
		return rec, err
	}
	rec.Rev, rec.UpdatedAt = rec.Rev+1, t.now
	return rec, t.putProfile(rec)
}

func profileName(id string, version int) string {
	if version == 0 {
		return id
	}
	return fmt.Sprintf("%s@%d", id, version)
}

// ListProfiles lists what a tenant can see: its own undeleted versions, then public
// versions of other tenants, then the shipped profiles given, in that order and each in
// key order, one page at a time.
func (t *Tx) ListProfiles(tenant string, shipped []ProfileRecord, p Page) ([]ProfileRecord, string, error) {
	phase, after := byte('o'), []byte(nil)
	if p.Cursor != "" {
		raw, err := DecodeCursor(p.Cursor, nil)
		if err != nil || len(raw) == 0 || bytes.IndexByte([]byte("ops"), raw[0]) < 0 {
			return nil, "", proto.Errorf(proto.InvalidInput, "cursor is not one this list returned; start again without it").WithPath("cursor")
		}
		phase, after = raw[0], raw[1:]
	}
	var out []ProfileRecord
	limit := p.limit()
	full := func() bool { return len(out) == limit }
	cursor := func(ph byte, key []byte) string { return EncodeCursor(append([]byte{ph}, key...)) }

	if phase == 'o' {
		prefix := fmt.Appendf(nil, "%s\x00", tenant)
		last, more, err := t.walk(bucketProfiles, prefix, after, full, func(k, v []byte) error {
			rec, err := t.profileRecord(k, v)
			if err != nil {
				return err
			}
			if !rec.Deleted {
				out = append(out, rec)
			}
			return nil
		})
		if err != nil || more {
			return out, cursor('o', last), err
		}
		phase, after = 'p', nil
	}
	if phase == 'p' {
		last, more, err := t.walk(bucketPublicProfiles, nil, after, full, func(k, _ []byte) error {
			id, version, owner, ok := parsePublicKey(k)
			if !ok {
				return fmt.Errorf("store: malformed public profile key %q", k)
			}
			if owner == tenant {
				return nil
			}
			rec, ok, err := t.Profile(owner, id, version)
			if ok {
				out = append(out, rec)
			}
			return err
		})
		if err != nil || more {
			return out, cursor('p', last), err
		}
		phase, after = 's', nil
	}
	start, err := shippedStart(after, len(shipped))
	if err != nil {
		return nil, "", err
	}
	for i := start; i < len(shipped); i++ {
		if full() {
			return out, cursor('s', binary.BigEndian.AppendUint64(nil, uint64(i))), nil
		}
		out = append(out, shipped[i])
	}
	return out, "", nil
}

// shippedStart is where a page of the shipped profiles starts: 0 for none given, else
// the index a cursor of the list wrote, 8 bytes of at most n. Any other is a cursor the
// list did not return (INVALID_INPUT): a client sends whatever text it likes, and an
// index taken as it is made the list read outside the shipped profiles.
func shippedStart(after []byte, n int) (int, error) {
	if len(after) == 0 {
		return 0, nil
	}
	if len(after) != 8 || binary.BigEndian.Uint64(after) > uint64(n) {
		return 0, proto.Errorf(proto.InvalidInput, "cursor is not one this list returned; start again without it").WithPath("cursor")
	}
	return int(binary.BigEndian.Uint64(after)), nil
}

// walk visits bucket entries under prefix after the key `after` (from the start when
// nil) until full reports true. It returns the last key visited and whether entries
// remain.
func (t *Tx) walk(bucket string, prefix, after []byte, full func() bool, fn func(k, v []byte) error) ([]byte, bool, error) {
	c := t.kv.cursor(bucket)
	from := prefix
	if after != nil {
		from = after
	}
	k, v := c.Seek(from)
	if after != nil && bytes.Equal(k, after) {
		k, v = c.Next()
	}
	var last []byte
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if full() {
			return last, true, nil
		}
		if err := fn(k, v); err != nil {
			return nil, false, err
		}
		last = bytes.Clone(k)
	}
	return last, false, nil
}

// checkPublicProfiles reports each profiles_public entry that does not name a stored,
// undeleted, public version, and each such version without its entry.
func (t *Tx) checkPublicProfiles() []error {
	var errs []error
	entries := map[string]bool{}
	c := t.kv.cursor(bucketPublicProfiles)
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		entries[string(k)] = true
		id, version, tenant, ok := parsePublicKey(k)
		if !ok {
			errs = append(errs, fmt.Errorf("store: %s/%q is not an entry of id, version and tenant", bucketPublicProfiles, k))
			continue
		}
		rec, found, err := t.Profile(tenant, id, version)
		switch {
		case err != nil:
			continue // a record Check reports
		case !found:
			errs = append(errs, fmt.Errorf("store: %s/%q names profile %s of tenant %s, which is not stored", bucketPublicProfiles, k, profileName(id, version), tenant))
		case rec.Deleted:
			errs = append(errs, fmt.Errorf("store: %s/%q names profile %s of tenant %s, which is deleted", bucketPublicProfiles, k, profileName(id, version), tenant))
		case rec.Visibility != Public:
			errs = append(errs, fmt.Errorf("store: %s/%q names profile %s of tenant %s, which is %s", bucketPublicProfiles, k, profileName(id, version), tenant, rec.Visibility))
		}
	}
	c = t.kv.cursor(bucketProfiles)
	for k, v := c.First(); k != nil; k, v = c.Next() {
		rec, err := t.profileRecord(k, v)
		if err != nil || rec.Visibility != Public || rec.Deleted {
			continue // a record Check reports, or a version the index leaves out
		}
		// An entry's value is empty, which reads as missing: the walk above saw the keys.
		if pk := publicKey(rec.ID, rec.Version, rec.Tenant); !entries[string(pk)] {
			errs = append(errs, fmt.Errorf("store: profile %s of tenant %s is public but has no %s entry %q", profileName(rec.ID, rec.Version), rec.Tenant, bucketPublicProfiles, pk))
		}
	}
	return errs
}
