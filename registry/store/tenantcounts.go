package store

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// TenantBounds bound the objects of each counted kind a tenant may hold in the store:
// its secrets, its catalog images, its profile versions, deleted ones a workflow used
// included (such a version is kept while its runs or nodes refer to it:
// PruneDeletedProfiles), its credentials, revoked
// and expired ones included until they are pruned, its pools and its nodes, retired ones
// included. One more is INVALID_STATE, reason quota, nothing written, so that one
// tenant cannot fill the store every tenant shares (a bbolt file; an etcd cluster, 2 GiB
// by default). The root tenant's objects are counted but not bounded: the platform's
// catalog is the operator's own; nor is a node the platform enrolls for a tenant (its
// machines are the operator's to allot). Zero fields are the defaults; give every
// replica on one store the same bounds.
type TenantBounds struct {
	Secrets         int
	Images          int
	ProfileVersions int
	Credentials     int
	Pools           int
	Nodes           int
}

// The defaults of TenantBounds (docs/security.md#what-strangers-can-cost).
const (
	DefaultTenantSecrets         = 10000
	DefaultTenantImages          = 10000
	DefaultTenantProfileVersions = 10000
	DefaultTenantCredentials     = 10000
	DefaultTenantPools           = 10000
	DefaultTenantNodes           = 10000
)

func (b *TenantBounds) defaults() {
	for _, f := range []struct {
		v   *int
		def int
	}{{&b.Secrets, DefaultTenantSecrets}, {&b.Images, DefaultTenantImages}, {&b.ProfileVersions, DefaultTenantProfileVersions},
		{&b.Credentials, DefaultTenantCredentials}, {&b.Pools, DefaultTenantPools}, {&b.Nodes, DefaultTenantNodes}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
}

// bucketTenantCounts holds each tenant's count of each counted kind: kind NUL tenant ->
// the count in decimal digits, no entry for none. It is written in the transaction that
// creates or deletes the object it counts (Format 4 on; credentials, pools and nodes
// Format 5 on), so that a creation reads one key rather than every object of its tenant.
const bucketTenantCounts = "tenant_counts"

// formatTenantCounts is the format that added bucketTenantCounts, formatMoreCounts the
// one that counts credentials, pools and nodes there too.
const (
	formatTenantCounts = 4
	formatMoreCounts   = 5
)

// countedKind is a kind of object whose number each tenant holds is bounded: one key of
// bucket per object, its tenant first, then NUL, unless owner reads its tenant from the
// record.
type countedKind struct {
	name, bucket string
	// owner is the tenant of the record at key, of value v, of a bucket whose keys do not
	// start with it; nil for one whose keys do.
	owner func(key, v []byte) (string, error)
	bound func(TenantBounds) int
	// flag is the serve flag that sets the bound, free what frees a place.
	flag, free string
	// since is the format from which the write paths count the kind.
	since int
}

// tenantOf is the tenant of the record of k at key, of value v.
func (k *countedKind) tenantOf(key, v []byte) (string, error) {
	if k.owner == nil {
		tenant, _, _ := bytes.Cut(key, []byte{0})
		return string(tenant), nil
	}
	return k.owner(key, v)
}

var (
	countSecrets = &countedKind{name: "secrets", bucket: bucketTenantSecrets,
		bound: func(b TenantBounds) int { return b.Secrets }, flag: "--tenant-secrets",
		free: "delete one it no longer needs (`secrets delete REF`; `secrets list` shows them)", since: formatTenantCounts}
	countImages = &countedKind{name: "images", bucket: bucketImageRefs,
		bound: func(b TenantBounds) int { return b.Images }, flag: "--tenant-images",
		free: "an image is kept for ever (there is no delete): the registry's operator may raise the bound", since: formatTenantCounts}
	countProfileVersions = &countedKind{name: "profile-versions", bucket: bucketProfiles,
		bound: func(b TenantBounds) int { return b.ProfileVersions }, flag: "--tenant-profile-versions",
		free: "delete a version no workflow ran (`profiles delete ID --profile-version N`; a deleted version a workflow ran is kept while a run of it is stored or a node names it, then pruned): the registry's operator may raise the bound", since: formatTenantCounts}
	countCredentials = &countedKind{name: "credentials", bucket: bucketCredentials,
		owner: func(key, v []byte) (string, error) {
			var c Credential
			err := decode(bucketCredentials, key, v, &c)
			return c.Tenant, err
		},
		bound: func(b TenantBounds) int { return b.Credentials }, flag: "--tenant-credentials",
		free: fmt.Sprintf("a revoked or expired credential is kept %d days (for `credentials list`), then deleted, which frees its place: the registry's operator may raise the bound", CredentialRetention/(24*time.Hour)), since: formatMoreCounts}
	countPools = &countedKind{name: "pools", bucket: bucketPools,
		bound: func(b TenantBounds) int { return b.Pools }, flag: "--tenant-pools",
		free: "a pool is kept for ever (there is no delete): `pools update` changes one's policy, or the registry's operator may raise the bound", since: formatMoreCounts}
	countNodes = &countedKind{name: "nodes", bucket: bucketNodesByPool,
		bound: func(b TenantBounds) int { return b.Nodes }, flag: "--tenant-nodes",
		free: "a node is kept for ever, a retired one too: the platform's operator may enroll the machine for the tenant, or raise the bound", since: formatMoreCounts}
	countedKinds = []*countedKind{countSecrets, countImages, countProfileVersions, countCredentials, countPools, countNodes}
)

func countKey(k *countedKind, tenant string) []byte { return []byte(k.name + "\x00" + tenant) }

// count is tenant's stored count of k; a value no write path writes is an error.
func (t *Tx) count(k *countedKind, tenant string) (int, error) {
	raw := t.getRaw(bucketTenantCounts, countKey(k, tenant))
	if raw == nil {
		return 0, nil
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < 1 || strconv.Itoa(n) != string(raw) {
		return 0, fmt.Errorf("store: %s/%q holds %q, not a count: `store check` reports it", bucketTenantCounts, countKey(k, tenant), raw)
	}
	return n, nil
}

func (t *Tx) setCount(k *countedKind, tenant string, n int) error {
	if n == 0 {
		return t.del(bucketTenantCounts, countKey(k, tenant))
	}
	return t.putRaw(bucketTenantCounts, countKey(k, tenant), []byte(strconv.Itoa(n)))
}

// admit counts one more object of k for tenant, about to be created in tx: past the
// bound it is INVALID_STATE, reason quota, at path, naming the bound and what frees a
// place (the root tenant is never refused).
func (t *Tx) admit(k *countedKind, tenant, path string) error {
	return t.admitBy(k, tenant, path, false)
}

// admitBy is admit of an object the platform creates for tenant when platform: counted,
// never refused.
func (t *Tx) admitBy(k *countedKind, tenant, path string, platform bool) error {
	n, err := t.count(k, tenant)
	if err != nil {
		return err
	}
	if bound := k.bound(t.store.bounds); n >= bound && tenant != RootTenant && !platform {
		return proto.Errorf(proto.InvalidState, "tenant %q holds %d %s, its bound (the registry's %s): %s", tenant, n, k.name, k.flag, k.free).
			WithPath(path).WithReason(proto.ReasonQuota)
	}
	return t.setCount(k, tenant, n+1)
}

// release counts one object of k fewer for tenant, deleted in tx.
func (t *Tx) release(k *countedKind, tenant string) error {
	n, err := t.count(k, tenant)
	if err != nil {
		return err
	}
	return t.setCount(k, tenant, max(n-1, 0))
}

// held is the number of objects of k tenant holds, read from the objects' keys (from
// every record of the bucket, for a kind whose keys do not start with the tenant).
func (t *Tx) held(k *countedKind, tenant string) (int, error) {
	n := 0
	var prefix []byte
	if k.owner == nil {
		prefix = []byte(tenant + "\x00")
	}
	c := t.kv.cursor(k.bucket)
	for key, v := c.Seek(prefix); key != nil && bytes.HasPrefix(key, prefix); key, v = c.Next() {
		owner, err := k.tenantOf(key, v)
		if err != nil {
			return 0, err
		}
		if owner == tenant {
			n++
		}
	}
	return n, nil
}

// countDiff compares bucketTenantCounts with the objects' keys, as tx reads them: the
// counts missing or wrong, then the counts of tenants that hold none, each in key order.
// Both are empty in a store of Format 5 or later that only this release wrote.
func (t *Tx) countDiff() (wrong, stray [][]byte, errs []error) {
	want := map[string]int{}
	for _, k := range countedKinds {
		c := t.kv.cursor(k.bucket)
		for key, v := c.First(); key != nil; key, v = c.Next() {
			tenant, err := k.tenantOf(key, v)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			want[string(countKey(k, tenant))]++
		}
	}
	c := t.kv.cursor(bucketTenantCounts)
	for key, v := c.First(); key != nil; key, v = c.Next() {
		n, ok := want[string(key)]
		switch {
		case !ok:
			stray = append(stray, slices.Clone(key))
		case string(v) != strconv.Itoa(n):
			wrong = append(wrong, slices.Clone(key))
		}
		delete(want, string(key))
	}
	for key := range want {
		wrong = append(wrong, []byte(key))
	}
	slices.SortFunc(wrong, bytes.Compare)
	return wrong, stray, errs
}

// kindOf is the counted kind and tenant of a key of bucketTenantCounts; nil for a kind
// this release does not count.
func kindOf(key []byte) (*countedKind, string) {
	name, tenant, _ := bytes.Cut(key, []byte{0})
	for _, k := range countedKinds {
		if k.name == string(name) {
			return k, string(tenant)
		}
	}
	return nil, ""
}

// recount makes each of keys (of bucketTenantCounts) hold the number of objects its
// tenant holds, as tx reads them, so that a list read in another transaction is applied
// safely.
func (t *Tx) recount(keys [][]byte) error {
	for _, key := range keys {
		k, tenant := kindOf(key)
		if k == nil {
			if err := t.del(bucketTenantCounts, key); err != nil {
				return err
			}
			continue
		}
		n, err := t.held(k, tenant)
		if err == nil {
			err = t.setCount(k, tenant, n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// tenantCounts is bucketTenantCounts as a format raise fills it.
var tenantCounts = derivedIndex{diff: (*Tx).countDiff, reindex: (*Tx).recount}

// countTenants makes every tenant's counts say what it holds, at every open (a store of a
// format before 4 holds none; a count a fault left wrong is corrected): it reads every
// counted object's key once and writes what differs, MaxPruned counts a transaction,
// each counted again there. The transaction that raises a store to 4 does it again
// (finalTenantCounts), so that no object a replica of an earlier release created
// meanwhile is left uncounted.
func (s *Store) countTenants() error { return s.fill(tenantCounts) }

// finalTenantCounts is countTenants in the transaction that raises the format.
func (t *Tx) finalTenantCounts() error { return t.fillLast(tenantCounts) }

// checkTenantCounts is Check's report of bucketTenantCounts in a store of format: each
// count that differs from the objects its tenant holds (a bound then refuses too early
// or too late), but for the kinds a store of that format does not count yet.
func (t *Tx) checkTenantCounts(format int) []error {
	wrong, stray, errs := t.countDiff()
	for _, key := range append(wrong, stray...) {
		k, tenant := kindOf(key)
		if k != nil && k.since > format {
			continue
		}
		held := 0
		if k != nil {
			var err error
			if held, err = t.held(k, tenant); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		errs = append(errs, fmt.Errorf("store: %s/%q holds %q, but the tenant holds %d: a write path missed it; report it with this line: the registry corrects it as it opens the store (restart one registry)",
			bucketTenantCounts, key, t.getRaw(bucketTenantCounts, key), held))
	}
	return errs
}
