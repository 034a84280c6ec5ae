package api

import (
	"context"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// EventsRequest is the body of metal.events: a node's event log in order, or only the
// events of one of its workflows. A follower gives the seq of the last event it has
// (afterSeq) and wait: the call then waits (up to 25 seconds) for the next events.
type EventsRequest struct {
	TenantID   string `json:"tenantId,omitempty"`
	NodeID     string `json:"nodeId"`
	WorkflowID string `json:"workflowId,omitempty"`
	// AfterSeq lists the events after that seq; not with cursor.
	AfterSeq uint64 `json:"afterSeq,omitempty"`
	// Wait, when no event comes after afterSeq (or none at all), waits for one.
	Wait bool `json:"wait,omitempty"`
	ListRequest
}

// EventList is the answer of metal.events.
type EventList struct {
	Events     []Event `json:"events"`
	NextCursor string  `json:"nextCursor,omitempty"`
	// LastSeq is the seq of the node's newest event (0 when it has none), whatever the
	// page: afterSeq lastSeq-n lists the newest n events, to read the log backwards.
	LastSeq uint64 `json:"lastSeq"`
}

// registerEvents adds metal.events.
func (s *Server) registerEvents() {
	Handle(s, "metal.events", ActionNodesRead, func(ctx context.Context, c *Caller, req EventsRequest) (out EventList, err error) {
		page, err := req.Page()
		if err != nil {
			return out, err
		}
		if req.AfterSeq > 0 {
			if page.Cursor != "" {
				return out, proto.Errorf(proto.InvalidInput, "give cursor (to page) or afterSeq (to follow), not both").WithPath("afterSeq")
			}
			page.Cursor = store.EventCursor(req.NodeID, req.AfterSeq)
		}
		changed := make(chan struct{}, 1)
		if req.Wait {
			defer s.store.OnWrite(func() {
				select {
				case changed <- struct{}{}:
				default:
				}
			}, store.BucketEvents)()
		}
		ctx, cancel := context.WithTimeout(ctx, maxWatch)
		defer cancel()
		for {
			err = c.view(func(tx *store.Tx) error {
				n, err := tenantNode(tx, c, NodeKey{TenantID: req.TenantID, NodeID: req.NodeID})
				if err != nil {
					return err
				}
				if req.WorkflowID != "" {
					if run, err := tx.Run(req.WorkflowID); err != nil || run.Node != n.ID {
						return proto.Errorf(proto.NotFound, "workflow %q of node %s not found", req.WorkflowID, n.ID).WithPath("workflowId")
					}
				}
				events, next, err := tx.Events(n.ID, req.WorkflowID, page)
				if err != nil {
					return err
				}
				last, err := tx.LastEventSeq(n.ID)
				out = EventList{Events: viewsOf(events, eventOf), NextCursor: next, LastSeq: last}
				return err
			})
			if err != nil || len(out.Events) > 0 || !req.Wait {
				return out, err
			}
			if err := c.awaitChange(); err != nil {
				return out, err
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return out, nil
			}
		}
	})
}

// Event is one entry of a node's event log as the API shows it.
type Event struct {
	Seq        uint64    `json:"seq"`
	At         time.Time `json:"at"`
	Kind       string    `json:"kind"`
	NodeID     string    `json:"nodeId"`
	WorkflowID string    `json:"workflowId,omitempty"`
	Step       string    `json:"step,omitempty"`
	Use        string    `json:"use,omitempty"`
	From       string    `json:"from,omitempty"`
	To         string    `json:"to,omitempty"`
	// DurationSeconds is how long an ended step or workflow took.
	DurationSeconds float64      `json:"durationSeconds,omitempty"`
	Error           *proto.Error `json:"error,omitempty"`
	Detail          string       `json:"detail,omitempty"`
}

func eventOf(e store.Event) Event {
	return Event{Seq: e.Seq, At: e.At, Kind: e.Kind, NodeID: e.Node, WorkflowID: e.Workflow, Step: e.Step, Use: e.Use,
		From: e.From, To: e.To, DurationSeconds: e.Duration.Seconds(), Error: e.Error, Detail: e.Detail}
}

// What a client shows of an event: the CLI's table and the console's node page alike.

// ChangeText is what the event changed: a node's move (from -> to), a step's or run's
// outcome, with the detail that explains it.
func (e Event) ChangeText() string {
	change := e.To
	if e.From != "" {
		change = e.From + " -> " + e.To
	}
	switch {
	case e.Detail != "" && change == "":
		change = e.Detail
	case e.Detail != "":
		change += " (" + e.Detail + ")"
	}
	return change
}

// Took is an ended step's or run's duration, rounded to 100 ms; 0 for other events.
func (e Event) Took() time.Duration {
	return time.Duration(e.DurationSeconds * float64(time.Second)).Round(100 * time.Millisecond)
}

// ErrorText is a failure's code, message and reason; "" when the event has no error.
func (e Event) ErrorText() string {
	if e.Error == nil {
		return ""
	}
	failure := string(e.Error.Code) + ": " + e.Error.Message
	if e.Error.Details.Reason != "" {
		failure += " (reason " + e.Error.Details.Reason + ")"
	}
	return failure
}
