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
// bar and the bytes), and the step's events.
func TestTimelineShowsProgressAndDurations(t *testing.T) {
	start := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	c := &Console{now: func() time.Time { return start.Add(90 * time.Second) }, pages: parsePages()}
	progress, _ := json.Marshal(map[string]any{"location": "cache", "read": 512 << 20, "sizeBytes": 1 << 30, "bytesWritten": 600 << 20, "skipped": 0})
	run := api.WorkflowView{ID: "wf_1", Kind: "deploy", State: api.RunRunning, CreatedAt: start, Steps: []api.RunStep{
		{Phase: "main", Index: 0, Use: "userdata.render", On: "control-plane", State: "succeeded", StartedAt: start, FinishedAt: start.Add(1500 * time.Millisecond)},
		{Phase: "main", Index: 1, Use: "deploy.deploy", On: "ramdisk", State: api.StepRunning, StartedAt: start.Add(2 * time.Second), Progress: progress,
			Attempts: []api.Attempt{{N: 1}, {N: 2}}},
	}}
	d := &liveData{Node: "nd_1", Run: &run, Running: true, At: c.now(), Events: eventsOf(run)}
	for _, s := range run.Steps {
		d.Steps = append(d.Steps, c.stepRowOf(s))
	}
	var b bytes.Buffer
	if err := c.pages["node"].ExecuteTemplate(&b, "live", d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1.5s", "1m28s", `<progress max="100" value="50"></progress>`, "512.0 MiB of 1.0 GiB read, 600.0 MiB written",
		"attempt 2", "steps[0] userdata.render succeeded", "after 1.5s", "steps[1] deploy.deploy started"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the live block lacks %q:\n%s", want, b.String())
		}
	}
}
