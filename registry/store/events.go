package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// The kinds of events.
const (
	// EventNodeState is a node moving from one state to another.
	EventNodeState = "node.state"
	// EventWorkflowStarted and EventWorkflowEnded bound a workflow run.
	EventWorkflowStarted = "workflow.started"
	EventWorkflowEnded   = "workflow.ended"
	// EventStepStarted and EventStepEnded bound a step of a run; an ended step has its
	// duration, and its error when it failed.
	EventStepStarted = "step.started"
	EventStepEnded   = "step.ended"
	// EventAttestation is a step whose result the node signed (disk.wipe, diag.dcgm)
	// verified and recorded.
	EventAttestation = "attestation"
	// EventAgentsRevoked is an operator's revocation of the certificates of the node's
	// agents (nodes revoke-identity): To is the identity epoch it moved to, Detail the
	// reason and the credential that asked; Workflow and Error the run it failed, when
	// one ran at the epoch it moved.
	EventAgentsRevoked = "agents.revoked"
	// EventTokenReused is a ramdisk or provisioned join token of the node presented again
	// after its join: From is the address of its join, To the address it came from again,
	// Detail what that may mean and what to do; Workflow and Error the run it failed, when
	// the registry contained it while one ran.
	EventTokenReused = "token.reused"
	// EventHiddenCapacity is a disk whose device hides capacity that may hold data from
	// a wipe, as inventory.refresh found it on the node's ramdisk: Step and Use the
	// step, Detail the disk, what it hides and what frees it.
	EventHiddenCapacity = "disk.hidden"
)

// Event retention: a node keeps its last EventsPerNode events, and none older than
// EventMaxAge once housekeeping prunes (PruneEvents).
const (
	EventsPerNode = 1000
	EventMaxAge   = 30 * 24 * time.Hour
)

// Event is one entry of a node's append-only event log. Seq counts the node's events
// from 1 and never repeats, so a reader resumes after the last one it saw.
type Event struct {
	Node   string    `json:"nodeId"`
	Tenant string    `json:"tenantId"`
	Seq    uint64    `json:"seq"`
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	// Workflow is the run the event belongs to, "" for none.
	Workflow string `json:"workflowId,omitempty"`
	// Step and Use name a step event's step (steps[2]) and its kind (deploy.image).
	Step string `json:"step,omitempty"`
	Use  string `json:"use,omitempty"`
	// From and To are a node's states (node.state); To alone is a step's or a run's
	// outcome (succeeded, failed, skipped).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Duration is how long the step or run took, for the .ended kinds.
	Duration time.Duration `json:"duration,omitempty"`
	// Error is a failure's code, reason and message.
	Error *proto.Error `json:"error,omitempty"`
	// Detail says why a step was skipped, or why a result is not attested.
	Detail string `json:"detail,omitempty"`
}

const (
	// bucketEvents holds the events: node NUL seq (8 bytes, big endian) -> Event.
	bucketEvents = "events"
	// bucketEventHeads holds each node's log bounds: node -> eventHead.
	bucketEventHeads = "event_heads"
)

// BucketEvents is the events' bucket, for OnWrite hooks that follow a node's log.
const BucketEvents Bucket = bucketEvents

// eventHead is where a node's log starts and ends: its events are Oldest to Next-1.
type eventHead struct {
	Oldest uint64 `json:"oldest"`
	Next   uint64 `json:"next"`
}

func eventPrefix(node string) []byte { return []byte(node + "\x00") }

func eventKey(node string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(eventPrefix(node), seq)
}

// AppendEvent adds e to its node's log, stamped with the transaction's time and the
// node's next seq, and drops the node's oldest events past EventsPerNode.
func (t *Tx) AppendEvent(e Event) (Event, error) {
	if e.Node == "" || e.Tenant == "" || e.Kind == "" {
		return e, fmt.Errorf("store: an event needs its node, tenant and kind")
	}
	var h eventHead
	if _, err := t.get(bucketEventHeads, []byte(e.Node), &h); err != nil {
		return e, err
	}
	if h.Next == 0 {
		h = eventHead{Oldest: 1, Next: 1}
	}
	e.Seq, e.At = h.Next, t.now
	if err := t.put(bucketEvents, eventKey(e.Node, e.Seq), e); err != nil {
		return e, err
	}
	h.Next++
	for ; h.Next-h.Oldest > EventsPerNode; h.Oldest++ {
		if err := t.del(bucketEvents, eventKey(e.Node, h.Oldest)); err != nil {
			return e, err
		}
	}
	return e, t.put(bucketEventHeads, []byte(e.Node), h)
}

// EventCursor is the cursor that lists a node's events after seq.
func EventCursor(node string, seq uint64) string { return EncodeCursor(eventKey(node, seq)) }

// LastEventSeq is the seq of node's newest event, 0 when it has none: a reader pages
// back from it (the events after LastEventSeq-n are the newest n).
func (t *Tx) LastEventSeq(node string) (uint64, error) {
	var h eventHead
	if _, err := t.get(bucketEventHeads, []byte(node), &h); err != nil || h.Next == 0 {
		return 0, err
	}
	return h.Next - 1, nil
}

// Events returns a page of node's events in order, only workflow's when it is not "".
func (t *Tx) Events(node, workflow string, p Page) ([]Event, string, error) {
	var out []Event
	next, err := t.scan(bucketEvents, eventPrefix(node), p, func(k, v []byte) (func(), error) {
		var e Event
		if err := decode(bucketEvents, k, v, &e); err != nil {
			return nil, err
		}
		if workflow != "" && e.Workflow != workflow {
			return nil, nil
		}
		return func() { out = append(out, e) }, nil
	})
	return out, next, err
}

// eventPruneReads is the most events PruneEvents reads in one transaction, each by its
// key: with the range of heads it walked and the format key, its compares stay under
// etcd's 128, so that on etcd it conflicts only with an event written to a node whose
// head it read. Past 128 each bucket read stands for all of it, and an event written to
// any node conflicted with it (docs/store.md, Limits).
const eventPruneReads = 100

// PruneEvents drops the events older than EventMaxAge, oldest first, of the nodes whose
// heads come after the key after (all when nil), reading at most eventPruneReads events,
// and returns how many it dropped and where the next transaction goes on from: nil once
// it reached the last node's head (Store.PruneOnward).
func (t *Tx) PruneEvents(after []byte) (int, []byte, error) {
	cutoff := t.now.Add(-EventMaxAge)
	reads, dropped := 0, 0
	// done is the last node whose old events are all dropped; whole is false while a node
	// is left with old events the reads ran out before.
	done, whole := after, true
	_, more, err := t.walk(bucketEventHeads, nil, after, func() bool { return reads == eventPruneReads }, func(k, v []byte) error {
		var h eventHead
		if err := decode(bucketEventHeads, k, v, &h); err != nil {
			return err
		}
		node, oldest := string(k), h.Oldest
		whole = false
		for ; oldest < h.Next; oldest++ {
			if reads == eventPruneReads {
				break
			}
			reads++
			var e Event
			if _, err := t.get(bucketEvents, eventKey(node, oldest), &e); err != nil {
				return err
			}
			if !e.At.Before(cutoff) {
				whole = true
				break
			}
			if err := t.del(bucketEvents, eventKey(node, oldest)); err != nil {
				return err
			}
			dropped++
		}
		if oldest == h.Next {
			whole = true
		}
		if whole {
			done = bytes.Clone(k)
		}
		if oldest == h.Oldest {
			return nil
		}
		return t.put(bucketEventHeads, k, eventHead{Oldest: oldest, Next: h.Next})
	})
	switch {
	case err != nil:
		return dropped, nil, err
	case !more && whole:
		return dropped, nil, nil
	case done == nil:
		return dropped, []byte{}, nil // the first node again, from the start
	}
	return dropped, done, nil
}
