package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// The states of a workflow run.
const (
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
)

// The states of one step of a run.
const (
	StepPending   = "pending"
	StepRunning   = "running"
	StepSucceeded = "succeeded"
	StepFailed    = "failed"
	StepSkipped   = "skipped"
)

// Run is one workflow run: a profile's steps for one node, fixed when the run starts,
// with every step's state, in a record bounded by design (MaxRunRecord, runsize.go). It is written at every step boundary, so a registry that
// restarts resumes it where it was. It holds the steps' states, not the profile: a run of
// a stored version refers to it (RunDocument), which, used, never changes, so the record
// stays small however large the document (up to 1 MiB) and its rendered steps are.
type Run struct {
	ID string `json:"id"`
	// Kind names the request that started the run (enroll, inspect, deploy, ...), which
	// decides what its end does to the node.
	Kind    string     `json:"kind"`
	Node    string     `json:"nodeId"`
	Tenant  string     `json:"tenantId"`
	Profile ProfileRef `json:"profile"`
	// Document is the profile document the run was started with when the run keeps its
	// own copy: a shipped profile's (not stored, and a release changes its wipe mode),
	// and every run stored before runs referred to their version. Empty for a run of a
	// stored version, which refers to it by Profile: a used version is never replaced,
	// and a deleted one only hidden, so the run reads what a copy would hold.
	Document json.RawMessage `json:"document,omitempty"`
	State    string          `json:"state"`
	Steps    []RunStep       `json:"steps"`
	// Failure is the step that failed the run; nil unless the run failed.
	Failure *StepFailure `json:"failure,omitempty"`
	// Cancelled is set when the run was cancelled: the step that was running (or next)
	// and the error the run fails with once its cleanup ran.
	Cancelled *StepFailure `json:"cancelled,omitempty"`
	// BootID is the boot id of the machine's agent that had joined last when the run was
	// created (AgentJoin.BootID): a join of that boot since is a reconnect, not the
	// machine booting (wait.agentJoined). Empty when unknown.
	BootID string `json:"bootId,omitempty"`
	// IdentityEpoch is the node's identity epoch the run runs at (Node.IdentityEpoch):
	// the node's when the run was created, or the one its creation moved it to (a
	// reinstall). A logical clock, which no replica's clock skews: the join tokens the
	// run mints and the agents it works with hold it, and a move past it cuts the run off
	// (metal's cutOff). Nil for a run stored before runs recorded it.
	IdentityEpoch *int64 `json:"identityEpoch,omitempty"`
	// EndBytes is what the transaction that ends the run writes beside the run's record
	// that only the run's kind knows of, in bytes as stored: a deploy's, the host section
	// it gives its node (registry/metal). The record keeps that much less (maxRecord), so
	// that its end fits one etcd request. 0 for none, and for a run stored before.
	EndBytes int `json:"endBytes,omitempty"`
	// Rev counts the record's changes; watchers wait for it to move.
	Rev        int       `json:"rev"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// ProfileRef names one profile version; Tenant is "builtin" for a shipped one.
type ProfileRef struct {
	Tenant  string `json:"tenantId"`
	ID      string `json:"id"`
	Version int    `json:"version"`
}

// RunStep is one step of a run and its state.
type RunStep struct {
	Phase string `json:"phase"`
	Index int    `json:"index"`
	Use   string `json:"use"`
	On    string `json:"on"`
	// Spec is the rendered step (profile.RenderedStep) as it was when the run started, as
	// runs stored before kept it. Empty since: the step is rendered from the run's
	// document (registry/workflow), which never changes.
	Spec  json.RawMessage `json:"spec,omitempty"`
	State string          `json:"state"`
	// Reason says why a step was skipped. The record keeps it only where it differs
	// from the reason of the skipped step before it (Run.stored): a skipped step without
	// one of its own after a skipped step reads as skipped for that step's reason.
	Reason string `json:"reason,omitempty"`
	// Attempts are the step's first attempt and its latest ones (KeptAttempts in all;
	// the first and the last only once the step ended in a run near MaxRunRecord), and
	// AttemptsDropped counts the ones between, dropped.
	Attempts        []Attempt `json:"attempts,omitempty"`
	AttemptsDropped int       `json:"attemptsDropped,omitempty"`
	// ViaFallback is set when the step succeeded through its fallback.
	ViaFallback bool            `json:"viaFallback,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       *proto.Error    `json:"error,omitempty"`
	// Progress is the latest progress detail the step's agent reported for its last
	// attempt (for example the bytes deploy.deploy has written); none until it reports,
	// whatever the attempt before reported.
	Progress   json.RawMessage `json:"progress,omitempty"`
	StartedAt  time.Time       `json:"startedAt,omitzero"`
	FinishedAt time.Time       `json:"finishedAt,omitzero"`
}

// Path names the step as profiles do: steps[N], acceptance[N] or cleanup[N].
func (s RunStep) Path() string {
	field := s.Phase
	if field == "main" {
		field = "steps"
	}
	return fmt.Sprintf("%s[%d]", field, s.Index)
}

// Terminal reports whether the step is done: succeeded, failed or skipped.
func (s RunStep) Terminal() bool {
	return s.State == StepSucceeded || s.State == StepFailed || s.State == StepSkipped
}

// Attempt is one try of a step or of its fallback.
type Attempt struct {
	Fallback bool `json:"fallback,omitempty"`
	// N counts the tries of the step, or of its fallback, from 1.
	N int `json:"n"`
	// CommandID is the id relayed commands of this attempt derive theirs from: the same
	// after a restart, so an agent answers a resent command with its stored result.
	CommandID string `json:"commandId"`
	// Awaiting is set once the attempt's work is done and it waits for the machine's
	// agent to rejoin.
	Awaiting bool `json:"awaiting,omitempty"`
	// BootID is the boot id of the machine's agent that had joined last when the attempt
	// started (AgentJoin.BootID): a join of that boot since is a reconnect, not the
	// machine's return from the attempt's power action or kexec. Empty when unknown.
	BootID string `json:"bootId,omitempty"`
	// Streamed is what the attempt's deploy.image progress reports counted toward the
	// deploy metrics so far: the most of each figure counted (registry/workflow's
	// deployStreamed). A report adds only what passes it, so that an attempt adds no
	// more than its image holds however often its stream goes back to 0.
	Streamed   Streamed     `json:"streamed,omitzero"`
	StartedAt  time.Time    `json:"startedAt"`
	FinishedAt time.Time    `json:"finishedAt,omitzero"`
	Error      *proto.Error `json:"error,omitempty"`
}

// Streamed is the bytes of an image read and written that an attempt's deploy.image
// progress reports counted toward the deploy metrics.
type Streamed struct {
	Read    int64 `json:"read"`
	Written int64 `json:"written"`
}

// StepFailure is the step that failed a run (or a node's deploy) and its error.
type StepFailure struct {
	RunID string       `json:"workflowId"`
	Step  string       `json:"step"`
	Use   string       `json:"use"`
	Error *proto.Error `json:"error"`
}

const (
	bucketRuns = "workflows"
	// bucketRunningRuns indexes the runs that are running: id -> nothing.
	bucketRunningRuns = "workflows_running"
)

// CreateRun stores a new run, running, with a new id. A run without a document of its
// own refers to a stored version, which must be marked used first (MarkProfileUsed):
// only then is it the document the run was started with for good. Its entry in
// profiles_refs keeps the version's record while the run is stored.
func (t *Tx) CreateRun(r Run) (Run, error) {
	if len(r.Steps) == 0 {
		return r, proto.Errorf(proto.InvalidInput, "profile %s@%d has no steps to run", r.Profile.ID, r.Profile.Version)
	}
	if len(r.Document) == 0 {
		rec, ok, err := t.Profile(r.Profile.Tenant, r.Profile.ID, r.Profile.Version)
		if err != nil {
			return r, err
		}
		if !ok || !rec.Used {
			return r, proto.Errorf(proto.Internal, "a run refers to profile %s@%d of tenant %s, which is not a used version (stored %t): mark it used in the transaction that creates the run",
				r.Profile.ID, r.Profile.Version, r.Profile.Tenant, ok)
		}
	}
	r.ID, r.State, r.Rev = "wf_"+randomHex(8), RunRunning, 1
	r.CreatedAt, r.UpdatedAt = t.now, t.now
	for i := range r.Steps {
		r.Steps[i].State = StepPending
	}
	if err := t.putRaw(bucketRunningRuns, []byte(r.ID), nil); err != nil {
		return r, err
	}
	if ref := runRefersToVersion(r); ref != nil {
		if err := t.putRaw(bucketProfileRefs, profileRefKey(*ref, refRun, r.ID), []byte(r.Node)); err != nil {
			return r, err
		}
	}
	return r, t.putRun(&r, nil)
}

// putRun stores run r, changed from old (nil for a new run), bounded as every run's
// record is (encodeRun).
func (t *Tx) putRun(r, old *Run) error {
	rec, err := encodeRun(r, old)
	if err != nil {
		return err
	}
	t.wrote(bucketRuns)
	return t.kv.put(bucketRuns, []byte(r.ID), rec)
}

// Run returns one run, NOT_FOUND when there is none of that id.
func (t *Tx) Run(id string) (Run, error) {
	var r Run
	ok, err := t.get(bucketRuns, []byte(id), &r)
	if err == nil && !ok {
		err = notFound("workflow", id)
	}
	r.readStored()
	return r, err
}

// RunDocument returns the profile document run r was started with: its own copy, or the
// document of the stored version it refers to.
func (t *Tx) RunDocument(r Run) (json.RawMessage, error) {
	if len(r.Document) > 0 {
		return r.Document, nil
	}
	rec, ok, err := t.Profile(r.Profile.Tenant, r.Profile.ID, r.Profile.Version)
	if err == nil && !ok {
		err = proto.Errorf(proto.Internal, "workflow %s refers to profile %s@%d of tenant %s, which is not stored: the store lost a record; restore it from a backup", r.ID, r.Profile.ID, r.Profile.Version, r.Profile.Tenant)
	}
	return rec.Document, err
}

// UpdateRun changes a run through change and stores it. A finished run never changes,
// a step that is done never changes again and steps are never added or removed: what a
// resumed run skips is exactly what completed.
func (t *Tx) UpdateRun(id string, change func(*Run) error) (Run, error) {
	old, err := t.Run(id)
	if err != nil {
		return old, err
	}
	if old.State != RunRunning {
		return old, proto.Errorf(proto.InvalidState, "workflow %s is %s and cannot change", id, old.State)
	}
	r := old
	r.Steps = append([]RunStep(nil), old.Steps...)
	if err := change(&r); err != nil {
		return old, err
	}
	if r.ID != id || len(r.Steps) != len(old.Steps) {
		return old, proto.Errorf(proto.Internal, "workflow %s: its id and steps are fixed when it starts", id)
	}
	for i, s := range old.Steps {
		if s.Terminal() && r.Steps[i].State != s.State {
			return old, proto.Errorf(proto.Internal, "workflow %s: %s is %s and cannot become %s", id, s.Path(), s.State, r.Steps[i].State)
		}
	}
	switch r.State {
	case RunRunning:
	case RunSucceeded, RunFailed:
		r.FinishedAt = t.now
		if err := t.del(bucketRunningRuns, []byte(id)); err != nil {
			return old, err
		}
		t.endedRuns = append(t.endedRuns, id)
		if err := t.putRaw(bucketRunsByEnd, runEndKey(pruneFrom(t.now, stepUses(r.Steps)), id), runEndValue(r)); err != nil {
			return old, err
		}
	default:
		return old, proto.Errorf(proto.Internal, "workflow %s: unknown state %q", id, r.State)
	}
	r.Rev, r.UpdatedAt = old.Rev+1, t.now
	if err := t.putRun(&r, &old); err != nil {
		return old, err
	}
	return r, nil
}

// checkRuns is Check's report of the runs that refer to a stored version (no document of
// their own): each whose version is not stored, or not marked used.
func (t *Tx) checkRuns() []error {
	var errs []error
	c := t.kv.cursor(bucketRuns)
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var r struct {
			Profile  ProfileRef      `json:"profile"`
			Document json.RawMessage `json:"document"`
		}
		if decode(bucketRuns, k, v, &r) != nil || len(r.Document) > 0 {
			continue // a record Check reports, or a run of its own document
		}
		if rec, ok, err := t.Profile(r.Profile.Tenant, r.Profile.ID, r.Profile.Version); err != nil || !ok || !rec.Used {
			errs = append(errs, fmt.Errorf("store: %s/%q refers to profile %s@%d of tenant %s, which is not a used version (%v)", bucketRuns, k, r.Profile.ID, r.Profile.Version, r.Profile.Tenant, err))
		}
	}
	return errs
}

// runRunning reports whether run id is running, from its entry in bucketRunningRuns
// alone (its record is read on no agent's behalf: every step's progress rewrites it).
func (t *Tx) runRunning(id string) bool {
	k, _ := t.kv.cursor(bucketRunningRuns).Seek([]byte(id))
	return string(k) == id
}

// RunningRuns returns the ids of the runs that are running, for a registry that starts
// to resume them.
func (t *Tx) RunningRuns() ([]string, error) {
	var ids []string
	c := t.kv.cursor(bucketRunningRuns)
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		ids = append(ids, string(k))
	}
	return ids, nil
}
