package registry

import (
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/site"
	"github.com/better-compute/better-compute/registry/store"
)

// TestAnAttemptThatTimedOutWhileTheRegistryWasDownWithdrawsItsCommand kills the
// registry while a step's command (a boot.prepareRamdisk of timeout 2s, retries 1) runs
// at the site agent, keeps it down past the step's timeout, and starts it again on the
// same data and addresses. The resumed attempt fails at once with TIMEOUT, as its
// timeout ran out, and withdraws its command, as an attempt that runs out of its
// timeout while the registry runs does: the command is recorded answered with TIMEOUT,
// and the agent that runs it cancels it. Before, the command stayed pending: the site
// agent, sent it again as it reconnected, ran it on past the step's timeout, beside the
// retry the step started next under a new id, and would have run it still had it
// connected only later.
func TestAnAttemptThatTimedOutWhileTheRegistryWasDownWithdrawsItsCommand(t *testing.T) {
	f, _, _, started := deployPrepareHeld(t, `{"id": "prep", "version": 1, "target": "metal", "steps": [{"use": "boot.prepareRamdisk", "timeout": "2s", "retries": 1}]}`)
	c := f.tenants["acme"]

	info := f.r.Info()
	f.must(f.r.Close(), "closing the registry")
	<-f.served
	time.Sleep(3 * time.Second) // past the step's timeout, with no registry
	f.r = newTestRegistry(t, Config{DataDir: f.dir, Listen: strings.TrimPrefix(info.URL, "https://"), AgentListen: info.AgentEndpoint,
		MetricsListen: "127.0.0.1:0"})
	f.served = serve(t, f.r)

	var first api.Attempt
	if !f.wait("the resumed attempt to fail", func() bool {
		wf, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: started.WorkflowID})
		if err != nil || len(wf.Steps[0].Attempts) == 0 || wf.Steps[0].Attempts[0].FinishedAt.IsZero() {
			return false
		}
		first = wf.Steps[0].Attempts[0]
		return true
	}) {
		t.FailNow()
	}
	if first.Error == nil || first.Error.Code != proto.Timeout {
		t.Fatalf("the resumed attempt ended with %+v, want TIMEOUT", first.Error)
	}
	var cmd store.AgentCommand
	f.must(f.r.st.View(func(tx *store.Tx) (err error) {
		cmd, err = tx.AgentCommand(site.Agent("rack-a"), first.CommandID)
		return err
	}), "reading the command")
	if !cmd.Done || cmd.Recorded == nil || cmd.Recorded.ErrorCode != proto.Timeout {
		t.Fatalf("command %s of the attempt that timed out while the registry was down: done %v, recorded %+v; want withdrawn with TIMEOUT", first.CommandID, cmd.Done, cmd.Recorded)
	}
}
