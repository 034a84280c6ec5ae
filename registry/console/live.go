package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

// liveData is a node's workflow timeline and a page of its event log: the block the
// live stream renders again at every change of the run and every new event.
type liveData struct {
	Node string
	// Run is the node's last workflow; nil when it never ran one.
	Run   *api.WorkflowView
	Steps []stepRow
	// Events are a page of the node's event log (metal.events), newest last.
	Events []api.Event
	// LastSeq is the seq of the node's newest event: the live stream follows the log
	// after it.
	LastSeq uint64
	// Older and Newer are the ?before= of the pages of older and newer events, 0 for
	// none; Newest links the newest page when this one is an older one.
	Older, Newer uint64
	Newest       bool
	// Running is set while the run runs and the page shows the newest events: the page
	// follows the live stream.
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

// eventsPage is how many events a node's page shows.
const eventsPage = 50

// liveOf reads a node's block as the session's credential: its workflow (workflows.get)
// and the page of its event log (metal.events) that ends before seq before, the newest
// page when before is 0.
func (c *Console) liveOf(ctx context.Context, s *session, node, workflow string, before uint64) (*liveData, error) {
	d := &liveData{Node: node}
	if workflow != "" {
		var run api.WorkflowView
		if err := c.call(ctx, s, "workflows.get", api.GetWorkflowRequest{ID: workflow}, &run); err != nil {
			return nil, err
		}
		d.Run, d.Running = &run, run.State == api.RunRunning && before == 0
		for _, st := range run.Steps {
			d.Steps = append(d.Steps, c.stepRowOf(st))
		}
	}
	// The log's newest seq first, then the page that ends at end: the events after
	// end-eventsPage.
	var head api.EventList
	if err := c.call(ctx, s, "metal.events", api.EventsRequest{NodeID: node, ListRequest: api.ListRequest{Limit: 1}}, &head); err != nil {
		return nil, err
	}
	d.LastSeq = head.LastSeq
	end := d.LastSeq
	if before > 0 && before <= end {
		end = before - 1
	}
	if end > 0 {
		start := end - min(end, eventsPage)
		var page api.EventList
		if err := c.call(ctx, s, "metal.events", api.EventsRequest{NodeID: node, AfterSeq: start, ListRequest: api.ListRequest{Limit: int(end - start)}}, &page); err != nil {
			return nil, err
		}
		d.Events = page.Events
		if len(d.Events) > 0 && d.Events[0].Seq > 1 {
			d.Older = d.Events[0].Seq
		}
	}
	if end < d.LastSeq {
		d.Newest = true
		if end+eventsPage < d.LastSeq {
			d.Newer = end + eventsPage + 1
		}
	}
	d.At = c.now()
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

// live streams a node's block as server-sent events while its workflow runs: an
// "update" event with the block's HTML at every change of the run (workflows.get with
// afterRev) and every new event of the node's log (metal.events with afterSeq and
// wait), and at least every 25 seconds so the running step's time moves; then "end"
// once the run ended. Every read is the API's, as the session's credential, and the
// stream ends with the session (sign-out, expiry): it sends nothing after. Only the
// console's own node page opens one: a session holds maxLive streams, which a page of
// another origin of the same site, sent the session's cookie, would otherwise take with
// as many images or frames of the stream's URL, leaving the operator's own pages none.
func (c *Console) live(w http.ResponseWriter, r *http.Request) {
	if !fetchedHere(r) {
		e := proto.Errorf(proto.Forbidden, "a node's live stream is opened only by the node's page in this console, not by a page of another origin (Sec-Fetch-Site %s): open https://%s/ui/nodes/%s",
			proto.Quote(r.Header.Get("Sec-Fetch-Site")), r.Host, url.PathEscape(r.PathValue("id")))
		c.log.Info("console live stream refused", "node", proto.Quote(r.PathValue("id")), "code", e.Code)
		http.Error(w, string(e.Code)+": "+e.Message, e.Code.HTTPStatus())
		return
	}
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
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var node api.NodeView
	var d *liveData
	err := c.call(ctx, s, "metal.get", api.NodeKey{NodeID: r.PathValue("id")}, &node)
	if err == nil {
		d, err = c.liveOf(ctx, s, node.ID, node.Workflow, 0)
	}
	if err != nil {
		// Refused before the stream starts, the answer is the API's, with its Retry-After
		// when it was refused for now (once it has started, streamEnds).
		e, status := refusal(w, err)
		http.Error(w, string(e.Code)+": "+e.Message, status)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	changed, failed := make(chan struct{}, 1), make(chan error, 2)
	if d.Running {
		go c.follow(ctx, changed, failed, func(rev int) (int, error) {
			var run api.WorkflowView
			err := c.call(ctx, s, "workflows.get", api.GetWorkflowRequest{ID: node.Workflow, AfterRev: rev}, &run)
			return run.Rev, err
		}, d.Run.Rev)
		go c.follow(ctx, changed, failed, func(seq int) (int, error) {
			var l api.EventList
			err := c.call(ctx, s, "metal.events", api.EventsRequest{NodeID: node.ID, AfterSeq: uint64(seq), Wait: true, ListRequest: api.ListRequest{Limit: 1}}, &l)
			return int(l.LastSeq), err
		}, int(d.LastSeq))
	}
	expiry := time.NewTimer(s.expires.Sub(c.now()))
	defer expiry.Stop()
	for {
		if c.sessions.over(s) {
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
		if !d.Running {
			writeEvent(w, "end", nil)
			rc.Flush()
			return
		}
		// The followers stop once ctx ends, and a wait the stopping registry answered
		// without an error tells failed nothing: the stream ends with ctx.
		select {
		case <-ctx.Done():
			return
		case <-s.ended:
			return
		case <-expiry.C:
			return
		case <-changed:
		case err := <-failed:
			c.streamEnds(ctx, w, rc, node.ID, err)
			return
		}
		if d, err = c.liveOf(ctx, s, node.ID, node.Workflow, 0); err != nil {
			c.streamEnds(ctx, w, rc, node.ID, err)
			return
		}
	}
}

// streamEnds ends a started stream whose read failed with err. Its status and headers
// are sent, so a refusal for now cannot carry Retry-After: the stream's own retry field
// tells the browser's EventSource to connect again after the seconds the API asked, not
// after its own delay.
func (c *Console) streamEnds(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, node string, err error) {
	if ctx.Err() != nil {
		return
	}
	c.log.Info("console live stream ends", "node", node, "code", proto.CodeOf(err))
	if seconds := api.RetryAfter(err); seconds >= 0 {
		fmt.Fprintf(w, "retry: %d\n\n", max(seconds, 1)*1000)
		rc.Flush()
	}
}

// follow calls next with the last position it returned (a run's rev, a log's seq)
// until ctx ends, each call waiting for the next change; each answer, a change or a
// wait that ran out, signals changed, and an error ends it on failed.
func (c *Console) follow(ctx context.Context, changed chan<- struct{}, failed chan<- error, next func(after int) (int, error), after int) {
	for ctx.Err() == nil {
		var err error
		if after, err = next(after); err != nil {
			failed <- err
			return
		}
		select {
		case changed <- struct{}{}:
		default:
		}
	}
}

// writeEvent writes one server-sent event, each line of data on its own data: line. A
// browser ends a stream's line at a CR alone too, and a block's values are an agent's
// text as it came (a step's error), which html/template leaves CRs in: each CR is sent
// as the line break HTML reads it as, so no value ends the event or adds a field.
func writeEvent(w http.ResponseWriter, name string, data []byte) error {
	var b bytes.Buffer
	b.WriteString("event: " + name + "\n")
	data = bytes.ReplaceAll(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")), []byte("\r"), []byte("\n"))
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteString("\n")
	}
	b.WriteString("\n")
	_, err := w.Write(b.Bytes())
	return err
}
