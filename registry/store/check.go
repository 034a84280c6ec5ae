package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// recordBuckets hold records (the schema byte, then JSON); the other buckets hold index
// entries or raw keys.
var recordBuckets = []string{bucketTenants, bucketSites, bucketPools, bucketNodes, bucketImages, bucketImageSigners,
	bucketRuns, bucketNodeSpecs, bucketCredentials, bucketJoinTokens, bucketImageLocations, bucketSiteCacheReports,
	bucketEvents, bucketEventHeads}

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
	{bucketImageRefs, bucketImages, func(_, v []byte) []byte { return v }},
	{bucketImageDigests, bucketImages, afterLastNUL},
	{bucketRunningRuns, bucketRuns, func(k, _ []byte) []byte { return k }},
}

// Check verifies the store as a whole: the file's pages and free list (bbolt's own
// check), every record of the record buckets readable by this registry's schema, and
// every index entry naming a record that exists. It returns every problem found, joined.
func (s *Store) Check() error {
	var errs []error
	err := s.db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			errs = append(errs, fmt.Errorf("store file: %w", err))
		}
		for _, name := range recordBuckets {
			b := tx.Bucket([]byte(name))
			if b == nil {
				continue
			}
			b.ForEach(func(k, v []byte) error {
				if len(v) == 0 || v[0] != schemaVersion || !json.Valid(v[1:]) {
					errs = append(errs, fmt.Errorf("store: %s/%q is not a record of schema %d", name, k, schemaVersion))
				}
				return nil
			})
		}
		for _, ix := range indexes {
			b, records := tx.Bucket([]byte(ix.bucket)), tx.Bucket([]byte(ix.records))
			if b == nil {
				continue
			}
			b.ForEach(func(k, v []byte) error {
				if target := ix.target(k, v); records == nil || records.Get(target) == nil {
					errs = append(errs, fmt.Errorf("store: %s/%q names %s/%q, which does not exist", ix.bucket, k, ix.records, target))
				}
				return nil
			})
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}
