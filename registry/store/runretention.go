package store

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// RunRetention is how long a finished workflow run is kept after its end: far longer
// than its node's events (EventMaxAge), which name it, and than any join token it
// minted is kept (its expiry and join.Retention). A run its node's record names is kept
// past it (runNamed).
const RunRetention = 90 * 24 * time.Hour

// SignedRunRetention is how long a finished run that ran a step whose result the
// machine signs (a disk.wipe's attestation, a diag.dcgm's) is kept after its end: the
// proof an auditor asks for (`workflows attestation`) that a machine's disks were wiped
// before its next tenant got it, or that its GPUs passed acceptance, outlives a yearly
// audit of the year it was made in, by a month.
const SignedRunRetention = 395 * 24 * time.Hour

// signedUses are the steps whose result the machine signs, which keep their run
// SignedRunRetention.
var signedUses = []string{proto.CommandDiskWipe, proto.CommandDiagDCGM}

// pruneFrom is when a run that ended at end, of steps of uses, is first looked at for
// pruning, as a run ended RunRetention before that would be: its end, or for a run of a
// step whose result the machine signs SignedRunRetention after its end less
// RunRetention.
func pruneFrom(end time.Time, uses []string) time.Time {
	for _, use := range uses {
		if slices.Contains(signedUses, use) {
			return end.Add(SignedRunRetention - RunRetention)
		}
	}
	return end
}

// stepUses are the uses of steps, in order.
func stepUses(steps []RunStep) []string {
	uses := make([]string, len(steps))
	for i, s := range steps {
		uses[i] = s.Use
	}
	return uses
}

// bucketRunsByEnd indexes the finished runs by when they may be pruned: the end of the
// run (expiryTimeLen bytes, as expiryTime spells it), then its id -> its node's id. The
// transaction that ends a run (UpdateRun) writes its entry, so PruneRuns reads only the
// entries of the runs it prunes, however many runs the store holds. A run that ended
// under an earlier release has none, and is kept.
const bucketRunsByEnd = "workflows_by_end"

// runEndKey is the entry in bucketRunsByEnd of run id, to be looked at from at on.
func runEndKey(at time.Time, id string) []byte { return append(expiryTime(at), id...) }

// endedRun is the id of the run the bucketRunsByEnd key k names; nil for a key too
// short to be one.
func endedRun(k []byte) []byte {
	if len(k) <= expiryTimeLen {
		return nil
	}
	return k[expiryTimeLen:]
}

// PruneRuns deletes the finished runs whose entry in bucketRunsByEnd is older than
// cutoff (a run's end, RunRetention before it), at most MaxPruned entries read, and
// returns how many entries it read: a caller told MaxPruned calls again (Prune). A run
// its node's record still names (runNamed: its last workflow, its failure, ...) is kept
// and its entry moved to the transaction's time, to be looked at again a retention
// later. A run's claim left behind (its registry stopped before it released it) goes
// with the run, and so does its entry in profiles_refs, found by the version's key its
// entry's value holds (runEndValue).
func (t *Tx) PruneRuns(cutoff time.Time) (int, error) {
	end := expiryTime(cutoff)
	type entry struct{ key, node []byte }
	var entries []entry
	c := t.kv.cursor(bucketRunsByEnd)
	for k, v := c.First(); k != nil && len(entries) < MaxPruned && bytes.Compare(k, end) < 0; k, v = c.Next() {
		entries = append(entries, entry{slices.Clone(k), slices.Clone(v)})
	}
	named := map[string]map[string]bool{} // node id -> the runs its record names
	for _, e := range entries {
		if err := t.del(bucketRunsByEnd, e.key); err != nil {
			return 0, err
		}
		id := endedRun(e.key)
		if id == nil {
			continue
		}
		node, version := parseRunEndValue(e.node)
		if named[node] == nil {
			refs, err := t.runsNamed(node)
			if err != nil {
				return 0, err
			}
			named[node] = refs
		}
		if named[node][string(id)] {
			if err := t.putRaw(bucketRunsByEnd, runEndKey(t.now, string(id)), e.node); err != nil {
				return 0, err
			}
			continue
		}
		if err := t.del(bucketRuns, id); err != nil {
			return 0, err
		}
		if version != nil {
			if err := t.del(bucketProfileRefs, versionRefKey(version, refRun, string(id))); err != nil {
				return 0, err
			}
		}
		if t.getRaw(bucketRunClaims, id) != nil {
			if err := t.del(bucketRunClaims, id); err != nil {
				return 0, err
			}
		}
	}
	return len(entries), nil
}

// runsNamed is the set of the runs node's record names: its last workflow, the one it
// failed in, its retire's unverified wipe, its last remediation, the one its agents'
// revocation failed. Only those fields are read: a node's record may hold a host
// section of a MiB. Empty for a node that is not stored.
func (t *Tx) runsNamed(node string) (map[string]bool, error) {
	var n struct {
		Workflow       string       `json:"workflowId"`
		Failure        *StepFailure `json:"failure"`
		UnverifiedWipe *StepFailure `json:"unverifiedWipe"`
		Remediation    *Remediation `json:"remediation"`
		AgentsRevoked  *Revocation  `json:"agentsRevoked"`
	}
	if _, err := t.get(bucketNodes, []byte(node), &n); err != nil {
		return nil, err
	}
	named := map[string]bool{n.Workflow: true}
	for _, f := range []*StepFailure{n.Failure, n.UnverifiedWipe} {
		if f != nil {
			named[f.RunID] = true
		}
	}
	if n.Remediation != nil {
		named[n.Remediation.Workflow] = true
	}
	if n.AgentsRevoked != nil {
		named[n.AgentsRevoked.FailedWorkflow] = true
	}
	delete(named, "")
	return named, nil
}

// bucketRunsIndexed says how far IndexEndedRuns walked the runs: runsIndexedThrough ->
// the id of the last run it walked; runsIndexedDone -> empty, once it walked them all.
const bucketRunsIndexed = "workflows_indexed"

var (
	runsIndexedThrough = []byte("through")
	runsIndexedDone    = []byte("done")
)

// runsIndexedChunk is how many runs one IndexEndedRuns transaction reads: a run's
// record takes up to MaxRunRecord.
const runsIndexedChunk = 100

// IndexEndedRuns gives the finished runs without an entry in bucketRunsByEnd (they
// ended under an earlier release, which wrote none) theirs, at their end, so that
// PruneRuns prunes them too. It walks the runs in id order from where its last call
// stopped, runsIndexedChunk of them a transaction, and reports whether the walk is
// done: once it is, it reads nothing more. A run an earlier release ends after the walk
// passed it (a rolling upgrade on etcd) keeps no entry, and is kept; a record that does
// not read is passed over (Check reports it).
func (t *Tx) IndexEndedRuns() (done bool, err error) {
	if t.getRaw(bucketRunsIndexed, runsIndexedDone) != nil {
		return true, nil
	}
	type ended struct{ key, node []byte }
	var found []ended
	var last []byte
	c := t.kv.cursor(bucketRuns)
	k, v := c.First()
	if through := t.getRaw(bucketRunsIndexed, runsIndexedThrough); through != nil {
		if k, v = c.Seek(through); bytes.Equal(k, through) {
			k, v = c.Next()
		}
	}
	for n := 0; k != nil && n < runsIndexedChunk; k, v = c.Next() {
		n++
		last = slices.Clone(k)
		var r struct {
			Node       string          `json:"nodeId"`
			Profile    ProfileRef      `json:"profile"`
			Document   json.RawMessage `json:"document"`
			State      string          `json:"state"`
			FinishedAt time.Time       `json:"finishedAt"`
			Steps      []struct {
				Use string `json:"use"`
			} `json:"steps"`
		}
		if decode(bucketRuns, k, v, &r) != nil || r.State == RunRunning {
			continue
		}
		uses := make([]string, len(r.Steps))
		for i, s := range r.Steps {
			uses[i] = s.Use
		}
		found = append(found, ended{runEndKey(pruneFrom(r.FinishedAt, uses), string(k)), runEndValue(Run{Node: r.Node, Profile: r.Profile, Document: r.Document})})
	}
	for _, e := range found {
		if t.getRaw(bucketRunsByEnd, e.key) == nil {
			if err := t.putRaw(bucketRunsByEnd, e.key, e.node); err != nil {
				return false, err
			}
		}
	}
	if k == nil {
		return true, t.putRaw(bucketRunsIndexed, runsIndexedDone, nil)
	}
	return false, t.putRaw(bucketRunsIndexed, runsIndexedThrough, last)
}
