package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// recordBuckets hold records (the schema byte, then JSON); the other buckets hold index
// entries or raw keys.
var recordBuckets = []string{bucketTenants, bucketSites, bucketPools, bucketNodes, bucketImages, bucketImageSigners,
	bucketRuns, bucketNodeSpecs, bucketCredentials, bucketJoinTokens, bucketImageLocations, bucketSiteLocations, bucketSiteCacheReports,
	bucketEvents, bucketEventHeads, bucketProfiles}

// index is an index bucket and the record each of its entries names.
type index struct {
	bucket, records string
	// target is the key of the record an entry names.
	target func(k, v []byte) []byte
}

// afterLastNUL is the part of k after its last NUL: the id an index key ends with.
func afterLastNUL(k, _ []byte) []byte { return k[bytes.LastIndexByte(k, 0)+1:] }

var indexes = []index{
	{bucketPoolsBySite, bucketPools, func(k, _ []byte) []byte { return k[bytes.IndexByte(k, 0)+1:] }},
	{bucketNodesByPool, bucketNodes, afterLastNUL},
	{bucketNodesByHW, bucketNodes, func(_, v []byte) []byte { return v }},
	{bucketNodesByBMC, bucketNodes, afterLastNUL},
	{bucketNodesBySiteMAC, bucketNodes, afterLastNUL},
	{bucketNodeTPMByEK, bucketNodeTPM, func(_, v []byte) []byte { return v }},
	{bucketImageRefs, bucketImages, func(_, v []byte) []byte { return v }},
	{bucketImageDigests, bucketImages, afterLastNUL},
	{bucketRunningRuns, bucketRuns, func(k, _ []byte) []byte { return k }},
	{bucketRunsByEnd, bucketRuns, func(k, _ []byte) []byte { return endedRun(k) }},
	{bucketUsedProfiles, bucketProfiles, func(k, _ []byte) []byte { return k }},
}

// Check verifies the store as a whole: the backend's own consistency (bbolt: the file's
// pages and free list; etcd: every key under the prefix in the key layout), every record
// of the record buckets readable by this registry's schema, every index entry naming a
// record that exists, and each index the nodes' records say (nodeIndexes: nodes_by_bmc,
// nodes_by_site_mac) holding what they say, an entry for each and none other, every
// run that refers to a stored profile version naming one that is stored and used, and
// profiles_public holding an entry for each stored, undeleted, public profile version
// and none other, agent-commands-by-expiry an entry for each relayed command and none
// other, join_tokens_by_node an entry for each join token and none other, and
// tenant_counts each tenant's number of objects of each counted kind and none other,
// and image_digests an entry for each image, under its digest and tenant, and none other,
// and profiles_refs an entry for each run of a stored profile version and each node naming
// one, and none other, and workflows_by_end's values naming their run's version, and
// site_locations no location no catalog image has, image_locations none left.
// It returns every problem found, joined.
func (s *Store) Check() error {
	errs := s.kv.check()
	err := s.kv.view(func(tx kvTx) error {
		for _, name := range recordBuckets {
			c := tx.cursor(name)
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if len(v) == 0 || v[0] != schemaVersion || !json.Valid(v[1:]) {
					errs = append(errs, fmt.Errorf("store: %s/%q is not a record of schema %d", name, k, schemaVersion))
				}
			}
		}
		for _, ix := range indexes {
			c := tx.cursor(ix.bucket)
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if target := ix.target(k, v); tx.get(ix.records, target) == nil {
					errs = append(errs, fmt.Errorf("store: %s/%q names %s/%q, which does not exist", ix.bucket, k, ix.records, target))
				}
			}
		}
		errs = append(errs, s.tx(tx).checkNodeIndexes()...)
		errs = append(errs, s.tx(tx).checkRuns()...)
		errs = append(errs, s.tx(tx).checkPublicProfiles()...)
		if f, _ := parseFormat(tx.get(bucketFormat, formatKey)); f >= formatExpiryIndex {
			// A store of an earlier format is indexed as it is raised, at its next open.
			errs = append(errs, s.tx(tx).checkAgentCommandExpiry()...)
		}
		if f, _ := parseFormat(tx.get(bucketFormat, formatKey)); f >= formatTokenIndex {
			errs = append(errs, s.tx(tx).checkJoinTokensByNode()...)
		}
		if f, _ := parseFormat(tx.get(bucketFormat, formatKey)); f >= formatTenantCounts {
			errs = append(errs, s.tx(tx).checkTenantCounts(f)...)
		}
		if f, _ := parseFormat(tx.get(bucketFormat, formatKey)); f >= formatDigestTenants {
			errs = append(errs, s.tx(tx).checkImageDigests()...)
		}
		if f, _ := parseFormat(tx.get(bucketFormat, formatKey)); f >= formatProfileRefs {
			errs = append(errs, s.tx(tx).checkProfileRefs()...)
		}
		if f, _ := parseFormat(tx.get(bucketFormat, formatKey)); f >= formatSiteLocations {
			errs = append(errs, s.tx(tx).checkSiteLocations()...)
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}
