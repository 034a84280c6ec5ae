package store

import (
	"errors"
	"fmt"
	"slices"
	"time"

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
	// haltRoom is the most that stopping a run adds to its record: its cancelled failure
	// (Cancel, Fail, or the workflow engine failing a run it cannot take further), and the
	// end of the step it was on and of the steps after it (RunStep.Abandon). Each part is
	// bounded by constants, as JSON writes it at its longest (TestTheStopOfARunFitsHaltRoom
	// measures it): the failure's error brief (code, reason of 24 bytes and message of
	// compactMessage bytes, each byte of control characters six in JSON) under 1 KiB
	// with its step; the step it was on failed with that error brief, and its open
	// attempt likewise, under 1 KiB each; and the steps not started, skipped, nothing
	// each but one shared reason (a skipped step's reason that repeats the one of the
	// skipped step before it is not stored again, encodeRun), under 128 bytes. A
	// running run not halted keeps twice haltRoom free beside endGrowth: for its halt
	// (the failure, its step and the skipped ones), then for its end at once once its
	// cleanup cannot go on (failStuck: the cleanup step it was on and the ones after);
	// a halted run, haltRoom, for that end at once; and a halted run whose steps have all
	// ended, none: only its end (endGrowth) remains. So every write that stops or ends a
	// run fits, whatever the run holds: before, a halted run of hundreds of steps not
	// started (a reason of 50 bytes each), or whose cleanup filled the room its halt
	// freed, could not record its end, and stayed running.
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
// run, endGrowth less, the room of its end; one not halted twice haltRoom less again,
// the room of its halt and of its end at once after it; one halted with steps not
// ended, haltRoom less, the room of its end at once (haltRoom). A deploy of a host section of 1 MiB keeps a run of about 447 KiB;
// one under 512 KiB, the whole MaxRunRecord.
func (r *Run) maxRecord() int {
	limit := min(MaxRunRecord, etcdProbeBytes-endRoom-r.EndBytes)
	if r.State == RunRunning {
		limit -= endGrowth
	}
	return limit - r.stopRoom()
}

// stopRoom is what running run r keeps free beside endGrowth for the writes that stop
// it (haltRoom): twice haltRoom until it is halted, haltRoom while a step of its is not
// done, none once they all are, or once it ended.
func (r *Run) stopRoom() int {
	switch {
	case r.State != RunRunning:
		return 0
	case r.Cancelled == nil:
		return 2 * haltRoom
	case slices.ContainsFunc(r.Steps, func(s RunStep) bool { return !s.Terminal() }):
		return haltRoom
	}
	return 0
}

// encodeRun is r's record, bounded (bound), compacted when it would pass its bound
// (maxRecord, compact), and refused (RunTooLarge) when it passes it still, naming the
// largest result the change from old (nil for a new run) wrote, else the largest result.
func encodeRun(r, old *Run) ([]byte, error) {
	r.bound()
	limit := r.maxRecord()
	rec, err := encodeRecord(r.stored())
	if err != nil || len(rec) <= limit {
		return rec, err
	}
	r.compact()
	if rec, err = encodeRecord(r.stored()); err != nil || len(rec) <= limit {
		return rec, err
	}
	keeps := fmt.Sprintf("the %d a run keeps (this one %d", MaxRunRecord, limit)
	if r.EndBytes > 0 {
		keeps += fmt.Sprintf(", less the %d bytes its end writes beside it, as the end must fit one etcd request of %d", r.EndBytes, etcdProbeBytes)
	}
	if r.State == RunRunning {
		keeps += fmt.Sprintf(", less the %d its end may add", endGrowth)
	}
	if room := r.stopRoom(); room > 0 {
		keeps += fmt.Sprintf(" and the %d its failure may", room)
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

// stored is r as its record holds it: a skipped step's reason that repeats the reason of
// the skipped step before it is left out, so that the steps a run's halt or failure
// skips (hundreds, each "not run: ...") take nothing each but their state (written as
// long as "pending"). readStored gives it back.
func (r *Run) stored() *Run {
	s := *r
	s.Steps = slices.Clone(r.Steps)
	for i := len(s.Steps) - 1; i > 0; i-- {
		if s.Steps[i].repeats(s.Steps[i-1]) {
			s.Steps[i].Reason = ""
		}
	}
	return &s
}

// readStored gives r, as its record holds it (stored), the reasons left out: a skipped
// step without a reason of its own after a skipped step was skipped for that step's
// reason.
func (r *Run) readStored() {
	for i := 1; i < len(r.Steps); i++ {
		if s, prev := &r.Steps[i], r.Steps[i-1]; s.State == StepSkipped && s.Reason == "" && prev.State == StepSkipped {
			s.Reason = prev.Reason
		}
	}
}

// repeats reports whether s is skipped for the reason of prev, the step before it,
// skipped too.
func (s RunStep) repeats(prev RunStep) bool {
	return s.State == StepSkipped && prev.State == StepSkipped && s.Reason == prev.Reason
}

// AttemptOpen reports whether s is on an attempt that has not finished.
func (s RunStep) AttemptOpen() bool {
	n := len(s.Attempts)
	return n > 0 && s.Attempts[n-1].FinishedAt.IsZero()
}

// Abandon ends s, a step its run stops before it ran or ended (a cancelled run's main
// and acceptance steps, or every step of a run failed at once): one not started is
// skipped with reason; the one running fails with err, its open attempt with it, both
// keeping err brief (its code, reason and the start of its message; the run's failure
// keeps it whole), so that a run's stop adds at most haltRoom whatever err says.
func (s *RunStep) Abandon(err *proto.Error, reason string, now time.Time) {
	if s.State == StepPending {
		s.State, s.Reason = StepSkipped, reason
		return
	}
	err = brief(err)
	if s.AttemptOpen() {
		a := &s.Attempts[len(s.Attempts)-1]
		a.FinishedAt, a.Error = now, err
	}
	s.State, s.Error, s.FinishedAt = StepFailed, err, now
}
