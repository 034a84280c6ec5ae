package workflow

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/metrics"
	"github.com/better-compute/better-compute/registry/store"
)

// TestRunEventsSayWhatChanged: a change of a run becomes the events of what it did: a
// step started, a step ended with its outcome, duration, error or skip reason, a wipe's
// attestation verdict, the run's end; a change that moved nothing (a new attempt) writes
// none.
func TestRunEventsSayWhatChanged(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	fail := proto.Errorf(proto.DriverError, "the BMC refused").WithReason("bmc")
	old := store.Run{ID: "wf_1", Node: "nd_1", Tenant: "acme", State: store.RunRunning, CreatedAt: at, Steps: []store.RunStep{
		{Phase: "main", Index: 0, Use: "power.setPower", State: store.StepPending},
		{Phase: "main", Index: 1, Use: "disk.wipe", State: store.StepRunning, StartedAt: at},
		{Phase: "main", Index: 2, Use: "disk.wipe", State: store.StepRunning, StartedAt: at},
		{Phase: "main", Index: 3, Use: "diag.dcgm", State: store.StepPending},
		{Phase: "cleanup", Index: 0, Use: "boot.cleanUp", State: store.StepRunning, StartedAt: at},
	}}
	if got := runEvents(old, old); len(got) != 0 {
		t.Fatalf("no change wrote %v", got)
	}
	run := old
	run.Steps = append([]store.RunStep(nil), old.Steps...)
	run.Steps[0].State, run.Steps[0].StartedAt = store.StepRunning, at
	run.Steps[1].State, run.Steps[1].FinishedAt, run.Steps[1].Result = store.StepSucceeded, at.Add(90*time.Second), json.RawMessage(`{"attested":false,"reason":"no read-back"}`)
	run.Steps[2].State, run.Steps[2].FinishedAt, run.Steps[2].Result = store.StepSucceeded, at.Add(time.Minute), json.RawMessage(`{"attested":true}`)
	run.Steps[3].State, run.Steps[3].Reason = store.StepSkipped, "when gpu does not hold"
	run.Steps[4].State, run.Steps[4].FinishedAt, run.Steps[4].Error = store.StepFailed, at.Add(time.Second), fail
	run.State, run.FinishedAt = store.RunFailed, at.Add(2*time.Minute)
	run.Failure = &store.StepFailure{RunID: "wf_1", Step: "cleanup[0]", Use: "boot.cleanUp", Error: fail}
	var got []string
	for _, e := range runEvents(old, run) {
		if e.Node != "nd_1" || e.Tenant != "acme" || e.Workflow != "wf_1" {
			t.Errorf("event %+v is not of the run's node and tenant", e)
		}
		line := strings.Join([]string{e.Kind, e.Step, e.Use, e.To, e.Duration.String(), e.Detail}, " ")
		if e.Error != nil {
			line += " " + string(e.Error.Code) + "/" + e.Error.Details.Reason
		}
		got = append(got, line)
	}
	want := []string{
		"step.started steps[0] power.setPower  0s ",
		"step.ended steps[1] disk.wipe succeeded 1m30s ",
		"attestation steps[1] disk.wipe not attested 0s no read-back",
		"step.ended steps[2] disk.wipe succeeded 1m0s ",
		"attestation steps[2] disk.wipe attested 0s ",
		"step.ended steps[3] diag.dcgm skipped 0s when gpu does not hold",
		"step.ended cleanup[0] boot.cleanUp failed 1s  DRIVER_ERROR/bmc",
		"workflow.ended cleanup[0] boot.cleanUp failed 2m0s  DRIVER_ERROR/bmc",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDeployStreamedCountsWhatEachReportAdds: a deploy.image progress report adds the
// bytes it read and wrote past the most its command counted before; a report behind it
// (a restarted stream) adds nothing; a location no ramdisk sends is "other"; other
// progress is none; each figure counts up to what the deploy.image sent can read and
// write (2^63 bytes from an agent no more than the image holds).
func TestDeployStreamedCountsWhatEachReportAdds(t *testing.T) {
	for name, tc := range map[string]struct {
		counted       store.Streamed
		now           string
		location      string
		read, written int64
		sent          string
	}{
		"the first report":                   {store.Streamed{}, `{"location":"cache","read":100,"bytesWritten":80}`, proto.DeployFromCache, 100, 80, ""},
		"a later report":                     {store.Streamed{Read: 100, Written: 80}, `{"location":"cache","read":250,"bytesWritten":200}`, proto.DeployFromCache, 150, 120, ""},
		"a restart":                          {store.Streamed{Read: 250, Written: 200}, `{"location":"source","read":50,"bytesWritten":0}`, proto.DeployFromSource, 0, 0, ""},
		"a restart passing the most counted": {store.Streamed{Read: 250, Written: 200}, `{"location":"source","read":300,"bytesWritten":150}`, proto.DeployFromSource, 50, 0, ""},
		"an odd location":                    {store.Streamed{}, `{"location":"node-42","read":10}`, "other", 10, 0, ""},
		"a disk wipe's":                      {store.Streamed{}, `{"disk":"nvme0n1","done":10}`, "", 0, 0, ""},
		"not JSON":                           {store.Streamed{}, `nope`, "", 0, 0, ""},
		// An agent's figures count up to what the image it was sent holds.
		"2^63 of a raw image of 1 MiB": {store.Streamed{}, `{"location":"cache","read":9223372036854775807,"bytesWritten":9223372036854775807}`, proto.DeployFromCache, 1 << 20, 1 << 20,
			`{"format":"raw","compression":"none","sizeBytes":1048576}`},
		"past a raw image's end": {store.Streamed{Read: 1048000, Written: 1048000}, `{"location":"cache","read":5000000,"bytesWritten":5000000}`, proto.DeployFromCache, 576, 576,
			`{"format":"raw","sizeBytes":1048576}`},
		"2^63 of a compressed image": {store.Streamed{}, `{"location":"source","read":9223372036854775807,"bytesWritten":9223372036854775807}`, proto.DeployFromSource, 1 << 20, proto.MaxImageBytes,
			`{"format":"raw","compression":"zstd","sizeBytes":1048576}`},
		"2^63 of an image of unknown size": {store.Streamed{}, `{"location":"cache","read":9223372036854775807,"bytesWritten":9223372036854775807}`, proto.DeployFromCache, proto.MaxImageBytes, proto.MaxImageBytes,
			`{"format":"qcow2"}`},
		"a negative figure": {store.Streamed{}, `{"location":"cache","read":-5,"bytesWritten":-5}`, proto.DeployFromCache, 0, 0, ``},
	} {
		location, read, written := deployStreamed(tc.counted, json.RawMessage(tc.now), json.RawMessage(tc.sent))
		if location != tc.location || read != tc.read || written != tc.written {
			t.Errorf("%s: %q %d %d, want %q %d %d", name, location, read, written, tc.location, tc.read, tc.written)
		}
	}
}

// TestARestartedStreamCountsItsImageOnce: an agent reports that its deploy.image read
// and wrote the whole of a raw image of 1 MiB, then nothing, then the whole image, then
// nothing, then the whole image again. The deploy metrics count the image once: 1 MiB
// read from the cache and 1 MiB written. Before, each climb back from nothing counted
// the image again, 3 MiB of each for this one command.
func TestARestartedStreamCountsItsImageOnce(t *testing.T) {
	h := newHarness(t, nil)
	m := metrics.New(metrics.Sources{Log: slog.New(slog.DiscardHandler)})
	h.observer = m
	h.restart()
	h.agent.script = map[string][]outcome{"inventory.refresh": {hold}}
	id := h.start(doc(`{"use":"inventory.refresh"}`, "", ""))
	cmd := attemptID(id, "main", 0, false, 1)
	h.agent.waitRunning(t, cmd)
	sent := json.RawMessage(`{"format":"raw","compression":"none","sizeBytes":1048576}`)
	for _, n := range []int{1 << 20, 0, 1 << 20, 0, 1 << 20} {
		detail := fmt.Sprintf(`{"location":"cache","read":%d,"bytesWritten":%d}`, n, n)
		if err := h.engine.ReportProgress(cmd+":image", sent, json.RawMessage(detail)); err != nil {
			t.Fatal(err)
		}
	}
	read, written := counterValue(t, m, "better_compute_deploy_read_bytes_total"), counterValue(t, m, "better_compute_deploy_written_bytes_total")
	if read != 1<<20 || written != 1<<20 {
		t.Errorf("the deploy metrics counted %.0f bytes read and %.0f written, want the image's 1048576 of each", read, written)
	}
	h.agent.release(cmd)
	h.waitEnd(id)
}

// counterValue is the sum of the series of the counter name that m gathers.
func counterValue(t *testing.T, m *metrics.Registry, name string) float64 {
	t.Helper()
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == name {
			for _, s := range f.GetMetric() {
				sum += s.GetCounter().GetValue()
			}
		}
	}
	return sum
}
