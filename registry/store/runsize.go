package store

import (
	"errors"
	"fmt"

	"github.com/better-compute/better-compute/proto"
)

// A run's record is bounded by design, so that every write of it fits one etcd request
// of the store's probe figure (etcdProbeBytes) whatever the run met: the profile is
// referred to, not copied; a step keeps its first attempt and its latest ones, counting
// the ones between; an error keeps a bounded text; an agent's result and progress are
// bounded where they enter (proto.MaxStepResult, proto.MaxProgressDetail). A run whose
// record would still pass its bound (maxRecord: MaxRunRecord, less what its end writes
// beside it) keeps less of its ended steps (compact), and beyond that a change is
// refused (RunTooLarge), which the workflow engine records as the failure of the attempt
// whose result it was, rather than the store refusing the transaction.
const (
	// MaxRunRecord bounds a run's record as stored: with what a transaction of the
	// engine writes beside it (the node's events, the run's claim), well under the
	// probe's figure (etcdProbeBytes).
	MaxRunRecord = 896 << 10
	// endRoom is what the transaction that ends a run writes beside the run's record and
	// its EndBytes, at most: the node's record but its host section, its NodeSpec but
	// that section, the run's events and claim, the keys, compares, generation and
	// commit keys (etcd's header has etcdHeaderRoom of its own). A few KiB for a node of a few
	// labels and driver bindings (TestADeployAtItsBoundEndsOnADefaultEtcdCluster,
	// registry/metal, measures it); the rest for nodes of many labels.
	endRoom = 64 << 10
	// endGrowth is the most the end of a run adds to its record: its state, when it
	// finished, and its failure, whose error keeps its code, reason and the start of its
	// message (brief) in a record near its bound: under 1 KiB, as JSON writes it at its
	// longest. A running run keeps that much less than its bound, so that its end is
	// always kept.
	endGrowth = 2 << 10
	// haltRoom is what halting a running run adds to its record (Cancel, Fail, or the
	// workflow engine failing a run it cannot take further), which a running run not
	// halted keeps free beside endGrowth: its cancelled failure, whose error keeps its
	// code, reason and the start of its message (brief) in a record near its bound, under
	// 1 KiB as JSON writes it at its longest, and the end of the step it was on, failed
	// with that error, and of the steps after it, skipped. Without it, a run whose
	// results filled it to its bound could not record the failure that ends it, and
	// stayed running.
	haltRoom = 4 << 10
	// KeptAttempts is how many attempts a step keeps: its first, and its latest
	// KeptAttempts-1; RunStep.AttemptsDropped counts the ones between.
	KeptAttempts = 3
	// compactMessage is what an error of an ended step's attempt keeps of its message
	// in a run near its bound (brief); compactStepMessage what the step's own error
	// keeps.
	compactMessage     = 96
	compactStepMessage = 192
)

// RunTooLarge reports whether err refuses a change of a run because its record would
// pass its bound (maxRecord) even with its ended steps compacted: INVALID_INPUT, reason
// too-large, its path the result that takes the most (steps[N].result).
func RunTooLarge(err error) bool {
	e, ok := errors.AsType[*proto.Error](err)
	return ok && e.Code == proto.InvalidInput && e.Details.Reason == proto.ReasonTooLarge
}

// bound applies a run's fixed bounds: each step keeps KeptAttempts attempts, and every
// error the run keeps a bounded text (proto.Error.Cut): an agent's error carries
// whatever text it likes, up to its frame.
func (r *Run) bound() {
	for i := range r.Steps {
		s := &r.Steps[i]
		if n := len(s.Attempts); n > KeptAttempts {
			drop := n - KeptAttempts
			s.Attempts = append(append([]Attempt(nil), s.Attempts[0]), s.Attempts[1+drop:]...)
			s.AttemptsDropped += drop
		}
		for j := range s.Attempts {
			s.Attempts[j].Error = s.Attempts[j].Error.Cut(proto.MaxErrorMessage)
		}
		s.Error = s.Error.Cut(proto.MaxErrorMessage)
	}
	for _, f := range []*StepFailure{r.Failure, r.Cancelled} {
		if f != nil {
			f.Error = f.Error.Cut(proto.MaxErrorMessage)
		}
	}
}

// compact makes r's ended steps keep less, for a record near its bound: no progress,
// their first and last attempts, and shorter error messages; and the failure of an
// ended run and of a halted one, its step's error, brief.
func (r *Run) compact() {
	if r.State != RunRunning {
		r.Failure = r.Failure.brief()
	}
	r.Cancelled = r.Cancelled.brief()
	for i := range r.Steps {
		s := &r.Steps[i]
		if !s.Terminal() {
			continue
		}
		s.Progress = nil
		if n := len(s.Attempts); n > 2 {
			s.AttemptsDropped += n - 2
			s.Attempts = []Attempt{s.Attempts[0], s.Attempts[n-1]}
		}
		for j := range s.Attempts {
			s.Attempts[j].Error = brief(s.Attempts[j].Error)
		}
		s.Error = s.Error.Cut(compactStepMessage)
	}
}

// brief is what an ended step's attempt keeps of its error e in a run near
// its bound: its code, its reason and the start of its message; the step's own error
// says more.
func brief(e *proto.Error) *proto.Error {
	if e == nil {
		return nil
	}
	b := proto.Error{Code: e.Code, Message: e.Message, Details: proto.Details{Reason: e.Details.Reason}}
	return b.Cut(compactMessage)
}

// brief is f with its error brief; nil for nil.
func (f *StepFailure) brief() *StepFailure {
	if f == nil {
		return nil
	}
	b := *f
	b.Error = brief(f.Error)
	return &b
}

// maxRecord is what r's record may take: MaxRunRecord, and less for a run whose end
// writes much beside it (EndBytes), so that the end fits the largest request the store
// sends (etcdProbeBytes, which a cluster of etcd's defaults takes and the check at start
// sends) with endRoom for the rest of its transaction; a running
// run, endGrowth less, the room of its end, and one not halted haltRoom less again, the
// room of its failure. A deploy of a host section of 1 MiB keeps a run of about 447 KiB;
// one under 512 KiB, the whole MaxRunRecord.
func (r *Run) maxRecord() int {
	limit := min(MaxRunRecord, etcdProbeBytes-endRoom-r.EndBytes)
	if r.State == RunRunning {
		limit -= endGrowth
	}
	if r.State == RunRunning && r.Cancelled == nil {
		limit -= haltRoom
	}
	return limit
}

// encodeRun is r's record, bounded (bound), compacted when it would pass its bound
// (maxRecord, compact), and refused (RunTooLarge) when it passes it still, naming the
// largest result the change from old (nil for a new run) wrote, else the largest result.
func encodeRun(r, old *Run) ([]byte, error) {
	r.bound()
	limit := r.maxRecord()
	rec, err := encodeRecord(r)
	if err != nil || len(rec) <= limit {
		return rec, err
	}
	r.compact()
	if rec, err = encodeRecord(r); err != nil || len(rec) <= limit {
		return rec, err
	}
	keeps := fmt.Sprintf("the %d a run keeps (this one %d", MaxRunRecord, limit)
	if r.EndBytes > 0 {
		keeps += fmt.Sprintf(", less the %d bytes its end writes beside it, as the end must fit one etcd request of %d", r.EndBytes, etcdProbeBytes)
	}
	if r.State == RunRunning {
		keeps += fmt.Sprintf(", less the %d its end may add", endGrowth)
	}
	if r.State == RunRunning && r.Cancelled == nil {
		keeps += fmt.Sprintf(" and the %d its failure may", haltRoom)
	}
	keeps += ")"
	largest, results := -1, 0
	changed := func(i int) bool {
		return old != nil && len(old.Steps) == len(r.Steps) && len(old.Steps[i].Result) != len(r.Steps[i].Result)
	}
	for i, s := range r.Steps {
		results += len(s.Result)
		if largest < 0 || changed(i) && !changed(largest) || changed(i) == changed(largest) && len(s.Result) > len(r.Steps[largest].Result) {
			largest = i
		}
	}
	s := r.Steps[largest]
	return nil, proto.Errorf(proto.InvalidInput, "workflow %s would keep a record of %d bytes, more than %s; its steps' results take %d bytes, %d at %s: a step's result takes at most %d bytes, and a run's together less than %d; have the step answer less",
		r.ID, len(rec), keeps, results, len(s.Result), s.Path(), proto.MaxStepResult, limit).WithPath(s.Path() + ".result").WithReason(proto.ReasonTooLarge)
}
