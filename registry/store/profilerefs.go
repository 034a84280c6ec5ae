package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// bucketProfileRefs indexes what refers to each stored profile version of a tenant: the
// version's key (profileKey), then refRun and a run's id, or refNode and a node's id ->
// the node's id. A run of the version without a document of its own (it reads the
// version's document: RunDocument) has its entry from the transaction that creates it
// (CreateRun) to the one that prunes it (PruneRuns); a node has its entry while its
// record names the version as its profile (UpdateNode). PruneDeletedProfiles reads a
// deleted version's entries alone, not every run and node, to find that nothing refers
// to it any more.
const bucketProfileRefs = "profiles_refs"

// The kinds of an entry of bucketProfileRefs, the byte after the version's key.
const (
	refRun  = 'r'
	refNode = 'n'
)

// profileRefKey is the entry in bucketProfileRefs of the run or node id (of kind refRun
// or refNode) that refers to version ref.
func profileRefKey(ref ProfileRef, kind byte, id string) []byte {
	return versionRefKey(profileKey(ref.Tenant, ref.ID, ref.Version), kind, id)
}

// versionRefKey is profileRefKey of the version whose key (profileKey) is version.
func versionRefKey(version []byte, kind byte, id string) []byte {
	return append(append(slices.Clone(version), kind), id...)
}

// parseProfileRefKey is profileRefKey's inverse: the version's key, the kind and the id;
// ok is false for a key profileRefKey does not make.
func parseProfileRefKey(k []byte) (version []byte, kind byte, id string, ok bool) {
	i := bytes.IndexByte(k, 0)
	if i < 0 {
		return nil, 0, "", false
	}
	j := bytes.IndexByte(k[i+1:], 0)
	if j < 0 || len(k) < i+1+j+1+8+2 {
		return nil, 0, "", false
	}
	end := i + 1 + j + 1 + 8
	kind = k[end]
	if kind != refRun && kind != refNode {
		return nil, 0, "", false
	}
	return k[:end], kind, string(k[end+1:]), true
}

// storedVersion is the version ref names when it is a tenant's stored one, not a shipped
// profile's; nil otherwise.
func storedVersion(ref *ProfileRef) *ProfileRef {
	if ref == nil || ref.Tenant == BuiltinTenant || ref.Tenant == "" {
		return nil
	}
	return ref
}

// runRefersToVersion is the version run r reads its document from: its profile's, when
// it holds no document of its own; nil otherwise.
func runRefersToVersion(r Run) *ProfileRef {
	if len(r.Document) > 0 {
		return nil
	}
	return storedVersion(&r.Profile)
}

// runEndValue is the value of run r's entry in bucketRunsByEnd: its node's id, then, for
// a run of a stored version, NUL and the version's key, so that PruneRuns deletes the
// run's entry in bucketProfileRefs without reading the run.
func runEndValue(r Run) []byte {
	v := []byte(r.Node)
	if ref := runRefersToVersion(r); ref != nil {
		v = append(append(v, 0), profileKey(ref.Tenant, ref.ID, ref.Version)...)
	}
	return v
}

// parseRunEndValue is runEndValue's inverse: the node's id, and the version's key (nil
// for a run of its own document, and for an entry of a store of a format before 6).
func parseRunEndValue(v []byte) (node string, version []byte) {
	n, version, _ := bytes.Cut(v, []byte{0})
	return string(n), version
}

// indexNodeProfile keeps the entry in bucketProfileRefs of node n, changed from old (a
// zero Node for a new one), in step with the version its record names.
func (t *Tx) indexNodeProfile(old, n Node) error {
	was, is := storedVersion(old.Profile), storedVersion(n.Profile)
	if was != nil && (is == nil || *was != *is) {
		if err := t.del(bucketProfileRefs, profileRefKey(*was, refNode, old.ID)); err != nil {
			return err
		}
	}
	if is != nil && (was == nil || *was != *is) {
		return t.putRaw(bucketProfileRefs, profileRefKey(*is, refNode, n.ID), []byte(n.ID))
	}
	return nil
}

// PruneDeletedProfiles deletes the records of the deleted versions that nothing refers
// to any more (no entry of theirs in bucketProfileRefs: every run of them pruned, and no
// node's record naming them), of the marks in profiles_deleted after the key after (all
// when nil), at most MaxPruned marks read: with each record go its profiles_used mark
// and its place under the tenant's bound. It returns how many records it deleted, and
// the last mark it read when marks remain after it (nil at the bucket's end), for
// Store.PruneOnward. The mark stays, keeping the version's number from being given
// again. Nothing comes to refer to a deleted version (a deploy, a retry, a reinstall
// refuse it; a node names a version only as its deploy's run, stored and referring to
// it, ends), so the walk of its entries and the delete in one transaction are safe; on
// etcd the commit checks again what the walk read. Before, a deleted version a workflow
// ran kept its record and its place for ever, and a tenant that deployed and deleted
// versions reached its bound.
func (t *Tx) PruneDeletedProfiles(after []byte) (int, []byte, error) {
	var doomed [][]byte
	read := 0
	last, more, err := t.walk(bucketDeletedProfiles, nil, after, func() bool { return read == MaxPruned }, func(k, _ []byte) error {
		read++
		if t.getRaw(bucketProfiles, k) == nil {
			return nil // a version whose record went with its delete, or was pruned
		}
		if c := t.kv.cursor(bucketProfileRefs); !hasPrefix(c, k) {
			doomed = append(doomed, slices.Clone(k))
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	for _, k := range doomed {
		if err := t.del(bucketProfiles, k); err != nil {
			return 0, nil, err
		}
		if t.getRaw(bucketUsedProfiles, k) != nil {
			if err := t.del(bucketUsedProfiles, k); err != nil {
				return 0, nil, err
			}
		}
		tenant, _, _ := bytes.Cut(k, []byte{0})
		if err := t.release(countProfileVersions, string(tenant)); err != nil {
			return 0, nil, err
		}
	}
	if !more {
		last = nil
	}
	return len(doomed), last, nil
}

// hasPrefix reports whether the cursor's bucket holds a key that starts with prefix.
func hasPrefix(c cursor, prefix []byte) bool {
	k, _ := c.Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

// profileRefsDiff compares bucketProfileRefs and the values of bucketRunsByEnd with every
// run and node, as tx reads them: the entries of bucketProfileRefs missing or wrong, and
// those no run or node has, each in key order, and the keys of bucketRunsByEnd whose
// value does not name their run's version (runEndValue).
func (t *Tx) profileRefsDiff() (missing, stray, ends [][]byte, damaged []error) {
	want := map[string]string{}
	runs := map[string][]byte{} // run id -> its bucketRunsByEnd value
	c := t.kv.cursor(bucketRuns)
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var r struct {
			Node     string          `json:"nodeId"`
			Profile  ProfileRef      `json:"profile"`
			Document json.RawMessage `json:"document"`
		}
		if err := decode(bucketRuns, k, v, &r); err != nil {
			damaged = append(damaged, err)
			continue
		}
		run := Run{ID: string(k), Node: r.Node, Profile: r.Profile, Document: r.Document}
		runs[run.ID] = runEndValue(run)
		if ref := runRefersToVersion(run); ref != nil {
			want[string(profileRefKey(*ref, refRun, run.ID))] = run.Node
		}
	}
	c = t.kv.cursor(bucketNodes)
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var n struct {
			Profile *ProfileRef `json:"profile"`
		}
		if err := decode(bucketNodes, k, v, &n); err != nil {
			damaged = append(damaged, err)
			continue
		}
		if ref := storedVersion(n.Profile); ref != nil {
			want[string(profileRefKey(*ref, refNode, string(k)))] = string(k)
		}
	}
	c = t.kv.cursor(bucketProfileRefs)
	for k, v := c.First(); k != nil; k, v = c.Next() {
		node, ok := want[string(k)]
		switch {
		case !ok:
			stray = append(stray, slices.Clone(k))
		case node != string(v):
			missing = append(missing, slices.Clone(k))
		}
		delete(want, string(k))
	}
	for k := range want {
		missing = append(missing, []byte(k))
	}
	slices.SortFunc(missing, bytes.Compare)
	c = t.kv.cursor(bucketRunsByEnd)
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if value, ok := runs[string(endedRun(k))]; ok && !bytes.Equal(v, value) {
			ends = append(ends, slices.Clone(k))
		}
	}
	return missing, stray, ends, damaged
}

// reindexProfileRefs makes each of entries (keys of bucketProfileRefs) say what the run
// or node it names says, as tx reads it: written when that run refers to the version, or
// that node names it, dropped otherwise; so a list read in another transaction is
// applied safely.
func (t *Tx) reindexProfileRefs(entries [][]byte) error {
	for _, k := range entries {
		version, kind, id, ok := parseProfileRefKey(k)
		var node string
		if ok && kind == refRun {
			var r Run
			found, err := t.get(bucketRuns, []byte(id), &r)
			if err != nil {
				return err
			}
			if ref := runRefersToVersion(r); found && ref != nil && bytes.Equal(profileKey(ref.Tenant, ref.ID, ref.Version), version) {
				node = r.Node
			}
		} else if ok {
			var n struct {
				Profile *ProfileRef `json:"profile"`
			}
			found, err := t.get(bucketNodes, []byte(id), &n)
			if err != nil {
				return err
			}
			if ref := storedVersion(n.Profile); found && ref != nil && bytes.Equal(profileKey(ref.Tenant, ref.ID, ref.Version), version) {
				node = id
			}
		}
		var err error
		switch {
		case node == "":
			err = t.del(bucketProfileRefs, k)
		case string(t.getRaw(bucketProfileRefs, k)) != node:
			err = t.putRaw(bucketProfileRefs, k, []byte(node))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// reindexRunEnds makes each of keys (of bucketRunsByEnd) hold its run's runEndValue, as
// tx reads the run; an entry whose run is not stored is left (PruneRuns drops it).
func (t *Tx) reindexRunEnds(keys [][]byte) error {
	for _, k := range keys {
		cur := t.getRaw(bucketRunsByEnd, k)
		if cur == nil {
			continue
		}
		var r Run
		found, err := t.get(bucketRuns, endedRun(k), &r)
		if err != nil {
			return err
		}
		if v := runEndValue(r); found && !bytes.Equal(cur, v) {
			if err := t.putRaw(bucketRunsByEnd, k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkProfileRefs is Check's report of bucketProfileRefs: each run of a stored version
// or node naming one without its entry (PruneDeletedProfiles would delete the version's
// record while it reads it), each entry no run or node has (the version is kept longer),
// and each entry of bucketRunsByEnd whose value does not name its run's version.
func (t *Tx) checkProfileRefs() []error {
	missing, stray, ends, _ := t.profileRefsDiff()
	var errs []error
	for _, k := range missing {
		errs = append(errs, fmt.Errorf("store: %s/%q is missing or names another node: the run or node it names refers to the profile version, whose record a prune would delete; a write path missed it; report it with this line: the registry writes it as it raises the store's format",
			bucketProfileRefs, k))
	}
	for _, k := range stray {
		errs = append(errs, fmt.Errorf("store: %s/%q names no run or node that refers to the profile version: a write path left it behind, and it keeps a deleted version's record; delete it",
			bucketProfileRefs, k))
	}
	for _, k := range ends {
		errs = append(errs, fmt.Errorf("store: %s/%q does not name its run's node and profile version: its prune would leave the run's entry in %s behind; a write path missed it; report it with this line",
			bucketRunsByEnd, k, bucketProfileRefs))
	}
	return errs
}
