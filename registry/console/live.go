package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

// liveData is a node's workflow timeline and its events: the block the live stream
// renders again at every change of the run.
type liveData struct {
	Node string
	// Run is the node's last workflow; nil when it never ran one.
	Run   *api.WorkflowView
	Steps []stepRow
	// Events are the node's events, newest last.
	Events []event
	// Running is set while the run runs: the page follows the live stream.
	Running bool
	// At is when the block was rendered.
	At time.Time
}

// stepRow is a step of the timeline.
type stepRow struct {
	api.RunStep
	// Duration is how long the step ran, or runs so far; "" before it starts.
	Duration string
	// Percent is the step's progress when it reports one (bytes of an image, a disk
	// wipe's slowest disk), -1 when it does not.
	Percent  int
	Progress string
	// Attempt is the try under way or that ended the step.
	Attempt int
}

// event is one line of the node's event log.
type event struct {
	At     time.Time
	What   string
	Detail string
}

// liveAfter reads a node's workflow as the session's credential: workflows.get, waiting
// with afterRev for the run's next change.
func (c *Console) liveAfter(r *http.Request, s *session, node, workflow string, afterRev int) (*liveData, error) {
	d := &liveData{Node: node}
	if workflow == "" {
		return d, nil
	}
	var run api.WorkflowView
	if err := c.call(r.Context(), s, "workflows.get", api.GetWorkflowRequest{ID: workflow, AfterRev: afterRev}, &run); err != nil {
		return nil, err
	}
	d.At = c.now()
	d.Run, d.Running = &run, run.State == api.RunRunning
	for _, st := range run.Steps {
		d.Steps = append(d.Steps, c.stepRowOf(st))
	}
	d.Events = eventsOf(run)
	return d, nil
}

func (c *Console) stepRowOf(s api.RunStep) stepRow {
	row := stepRow{RunStep: s, Percent: -1, Attempt: len(s.Attempts)}
	switch {
	case !s.FinishedAt.IsZero() && !s.StartedAt.IsZero():
		row.Duration = durationText(s.FinishedAt.Sub(s.StartedAt))
	case !s.StartedAt.IsZero():
		row.Duration = durationText(c.now().Sub(s.StartedAt))
	}
	if s.State == api.StepRunning && len(s.Progress) > 0 {
		row.Progress, row.Percent = api.ProgressText(s.Progress), percentOf(s.Progress)
	}
	return row
}

// durationText rounds a duration for reading: 340ms, 2.4s, 3m12s.
func durationText(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// percentOf is how far a step's progress is: the bytes of an image read of its size, or
// the slowest disk of a wipe; -1 when the detail says neither.
func percentOf(raw json.RawMessage) int {
	var p struct {
		Read      int64          `json:"read"`
		SizeBytes int64          `json:"sizeBytes"`
		Percent   map[string]int `json:"percent"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return -1
	}
	if len(p.Percent) > 0 {
		return slices.Min(slices.Collect(maps.Values(p.Percent)))
	}
	if p.SizeBytes > 0 {
		return int(min(100, p.Read*100/p.SizeBytes))
	}
	return -1
}

// eventsOf is the node's event log as the API shows it today: the steps of its last
// workflow, each start and end with its time and duration. This is the one place the
// console reads events; the template block "events" shows them.
func eventsOf(run api.WorkflowView) []event {
	out := []event{{At: run.CreatedAt, What: "workflow " + run.Kind + " started", Detail: run.ID + " " + run.Profile.ID + "@" + fmt.Sprint(run.Profile.Version)}}
	for _, s := range run.Steps {
		if !s.StartedAt.IsZero() {
			out = append(out, event{At: s.StartedAt, What: s.Path() + " " + s.Use + " started"})
		}
		if !s.FinishedAt.IsZero() {
			e := event{At: s.FinishedAt, What: s.Path() + " " + s.Use + " " + s.State}
			if !s.StartedAt.IsZero() {
				e.Detail = "after " + durationText(s.FinishedAt.Sub(s.StartedAt))
			}
			if s.Error != nil {
				e.Detail = strings.TrimSpace(e.Detail + " " + string(s.Error.Code) + ": " + s.Error.Message)
			}
			out = append(out, e)
		}
	}
	if !run.FinishedAt.IsZero() {
		e := event{At: run.FinishedAt, What: "workflow " + run.Kind + " " + run.State}
		if f := run.Failure; f != nil && f.Error != nil {
			e.Detail = f.Step + " " + string(f.Error.Code) + ": " + f.Error.Message
		}
		out = append(out, e)
	}
	slices.SortStableFunc(out, func(a, b event) int { return a.At.Compare(b.At) })
	return out
}

// live streams a node's timeline block as server-sent events while its workflow runs:
// an "update" event with the block's HTML at every change of the run (and at least every
// 25 seconds, so the running step's time moves), then "end" once the run ended. Every
// read is the API's workflows.get as the session's credential.
func (c *Console) live(w http.ResponseWriter, r *http.Request) {
	s := c.sessions.of(r)
	if s == nil {
		http.Error(w, "not signed in, or the session expired: sign in again", http.StatusUnauthorized)
		return
	}
	if !c.sessions.openLive(s) {
		http.Error(w, fmt.Sprintf("this session follows %d nodes already: close a page", maxLive), http.StatusTooManyRequests)
		return
	}
	defer c.sessions.closeLive(s)
	var node api.NodeView
	if err := c.call(r.Context(), s, "metal.get", api.NodeKey{NodeID: r.PathValue("id")}, &node); err != nil {
		e := proto.AsError(err)
		http.Error(w, string(e.Code)+": "+e.Message, e.Code.HTTPStatus())
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	rev := 0
	for {
		d, err := c.liveAfter(r, s, node.ID, node.Workflow, rev)
		if err != nil {
			if r.Context().Err() == nil {
				c.log.Info("console live stream ends", "node", node.ID, "code", proto.CodeOf(err))
			}
			return
		}
		var b bytes.Buffer
		if err := c.pages["node"].ExecuteTemplate(&b, "live", d); err != nil {
			c.log.Error("console live block", "err", err)
			return
		}
		// The listener's read and write timeouts bound a call; a stream renews them at
		// every event it sends.
		rc.SetReadDeadline(time.Now().Add(time.Minute))
		rc.SetWriteDeadline(time.Now().Add(time.Minute))
		if err := writeEvent(w, "update", b.Bytes()); err != nil || rc.Flush() != nil {
			return
		}
		if d.Run == nil || !d.Running {
			writeEvent(w, "end", nil)
			rc.Flush()
			return
		}
		rev = d.Run.Rev
	}
}

// writeEvent writes one server-sent event, each line of data on its own data: line.
func writeEvent(w http.ResponseWriter, name string, data []byte) error {
	var b bytes.Buffer
	b.WriteString("event: " + name + "\n")
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteString("\n")
	}
	b.WriteString("\n")
	_, err := w.Write(b.Bytes())
	return err
}
