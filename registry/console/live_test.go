package console

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/api"
)

// TestTimelineShowsProgressAndDurations: the live block shows a finished step's
// duration, a running step's time so far and its progress as the agent reported it (a
// bar and the bytes), and a page of the node's events with its link to older ones.
func TestTimelineShowsProgressAndDurations(t *testing.T) {
	start := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	c := &Console{now: func() time.Time { return start.Add(90 * time.Second) }, pages: parsePages()}
	progress, _ := json.Marshal(map[string]any{"location": "cache", "read": 512 << 20, "sizeBytes": 1 << 30, "bytesWritten": 600 << 20, "skipped": 0})
	run := api.WorkflowView{ID: "wf_1", Kind: "deploy", State: api.RunRunning, CreatedAt: start, Steps: []api.RunStep{
		{Phase: "main", Index: 0, Use: "userdata.render", On: "control-plane", State: "succeeded", StartedAt: start, FinishedAt: start.Add(1500 * time.Millisecond)},
		{Phase: "main", Index: 1, Use: "deploy.deploy", On: "ramdisk", State: api.StepRunning, StartedAt: start.Add(2 * time.Second), Progress: progress,
			Attempts: []api.Attempt{{N: 1}, {N: 2}}},
	}}
	events := []api.Event{
		{Seq: 7, At: start, Kind: "step.started", WorkflowID: "wf_1", Step: "steps[0]", Use: "userdata.render"},
		{Seq: 8, At: start.Add(1500 * time.Millisecond), Kind: "step.ended", WorkflowID: "wf_1", Step: "steps[0]", Use: "userdata.render", To: "succeeded", DurationSeconds: 1.5},
		{Seq: 9, At: start.Add(1600 * time.Millisecond), Kind: "step.ended", WorkflowID: "wf_1", Step: "steps[1]", Use: "inventory.refresh", To: "succeeded", DurationSeconds: 0.016},
		{Seq: 10, At: start.Add(2 * time.Second), Kind: "step.started", WorkflowID: "wf_1", Step: "steps[1]", Use: "deploy.deploy"},
	}
	d := &liveData{Node: "nd_1", Run: &run, Running: true, At: c.now(), Events: events, LastSeq: 10, Older: 7}
	for _, s := range run.Steps {
		d.Steps = append(d.Steps, c.stepRowOf(s))
	}
	var b bytes.Buffer
	if err := c.pages["node"].ExecuteTemplate(&b, "live", d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1.5s", "1m28s", `<progress max="100" value="50"></progress>`, "512.0 MiB of 1.0 GiB read, 600.0 MiB written",
		"attempt 2",
		`<tr class="event" data-seq="8" data-kind="step.ended"><td>8</td>`, "<td>succeeded</td><td>1.5s</td>", "<td>succeeded</td><td>16ms</td>", `data-seq="10" data-kind="step.started"`,
		`href="/ui/nodes/nd_1?before=7">← older events</a>`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the live block lacks %q:\n%s", want, b.String())
		}
	}
}
