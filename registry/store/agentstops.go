package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// MaxReturnDelay is the longest a stopping agent endpoint asks its agents to wait before
// they come back, from the start of its stop: the bound of the stream's end a stop
// records (AgentStop.ReturnBy adds the re-slotted tries' spreads to it).
const MaxReturnDelay = 10 * time.Minute

// agentStopKept is how long a stop's record is kept after the moment it asked its agents
// back by: far longer than any wait for an agent's return after it.
const agentStopKept = 24 * time.Hour

// AgentStop is what a stopping run of a registry asked of the agents whose sessions it
// held: to come back by the end of the stream it told them of, and, refused on the
// return, within the re-slot spread it named after it, at each of its
// proto.ReslotTries re-slotted tries: ReturnBy is the later moment. The joins that run recorded (AgentJoin.Holder) count as ended no earlier than
// that: an agent asked to come back late, or refused and re-slotted, is not gone before.
// A run that died without telling records none.
type AgentStop struct {
	Holder
	StoppedAt time.Time `json:"stoppedAt"`
	ReturnBy  time.Time `json:"returnBy"`
}

// bucketAgentStops holds the stops: replica id, NUL, the run's start -> AgentStop.
const bucketAgentStops = "agent_stops"

// RecordAgentStop records that h's run, stopping now, asked the agents whose sessions it
// held to come back within returnIn, the stream's end (at most MaxReturnDelay), and one
// refused on its return to try again within spread after it, up to proto.ReslotTries
// times: they are back by then (ReturnBy; the spread at most proto.ReslotSpread's quarter
// of the stream, so never more than MaxReturnDelay and three quarters of it after the
// stop). It forgets the stops whose return ended more than agentStopKept ago.
func (t *Tx) RecordAgentStop(h Holder, returnIn, spread time.Duration) error {
	if h.Replica == "" || h.Started.IsZero() || returnIn < 0 || spread < 0 {
		return proto.Errorf(proto.Internal, "an agent stop needs a replica, its run's start, and a return and a re-slot spread that are not negative")
	}
	var old [][]byte
	_, err := t.scan(bucketAgentStops, nil, Page{}, func(k, v []byte) (func(), error) {
		var s AgentStop
		if err := decode(bucketAgentStops, k, v, &s); err != nil {
			return nil, err
		}
		return func() {
			if s.ReturnBy.Add(agentStopKept).Before(t.now) {
				old = append(old, k)
			}
		}, nil
	})
	if err != nil {
		return err
	}
	for _, k := range old {
		if err := t.del(bucketAgentStops, k); err != nil {
			return err
		}
	}
	return t.put(bucketAgentStops, agentStopKey(h), AgentStop{Holder: h, StoppedAt: t.now, ReturnBy: t.now.Add(returnWithin(returnIn, spread))})
}

// returnWithin is how long after its stop a run that asked its agents back within
// returnIn (the stream's end) waits for them: the stream's end, at most MaxReturnDelay,
// and the spread within which an agent refused on its return tries again, at most a
// quarter of the stream (proto.ReslotSpread), once for each of its re-slotted tries: an
// agent refused at the first and the second tries again after them.
func returnWithin(returnIn, spread time.Duration) time.Duration {
	end := min(returnIn, MaxReturnDelay)
	return end + proto.ReslotTries*min(spread, proto.ReslotSpread(end))
}

// AgentReturnBy is the moment h's run asked the agents whose sessions it held to be back
// by when it stopped, its re-slotted tries included (never more than MaxReturnDelay and
// three quarters of it after its stop: RecordAgentStop); zero when it recorded
// no stop (it runs, it died, or it names no run).
func (t *Tx) AgentReturnBy(h Holder) (time.Time, error) {
	if h.Replica == "" || h.Started.IsZero() {
		return time.Time{}, nil
	}
	var s AgentStop
	ok, err := t.get(bucketAgentStops, agentStopKey(h), &s)
	if err != nil || !ok {
		return time.Time{}, err
	}
	return s.ReturnBy, nil
}

func agentStopKey(h Holder) []byte {
	return []byte(h.Replica + "\x00" + h.Started.UTC().Format(time.RFC3339Nano))
}
