package workflow

import (
	"encoding/json"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestAnEndedRunsCommands: the commands a run's attempts relayed, as the store holds them
// for the node's own agent and its site's, once the run is cancelled and its cleanup
// then fails at once (the registry cannot record its result: too large for an etcd
// cluster of the defaults). The attempt the cancel abandoned and the cleanup's attempt
// that failStuck abandoned keep only the digests of their answered commands, as any
// attempt's end does (before: their full answers, until the commands expired a day
// later); a command of the abandoned attempt still pending is withdrawn with the
// cancellation, so that an agent running it cancels it, and kept as a digest; the other
// commands of the run still pending are dropped at its end, for both agents; another
// run's pending commands, for the same agents, are left as they are.
func TestAnEndedRunsCommands(t *testing.T) {
	cfg := store.EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}
	h := newHarnessOn(t, nil, func(opts store.Options) (*store.Store, error) { return store.OpenEtcd(cfg, opts) })
	h.agent.script = map[string][]outcome{"power.getPower": {hold}, "boot.cleanUp": {{result: refused}}}
	id := h.start(doc(`{"use":"power.getPower","timeout":"30m"}`, "", `{"use":"boot.cleanUp"}`))
	main, cleanup := attemptID(id, "main", 0, false, 1), attemptID(id, "cleanup", 0, false, 1)
	unrecorded := attemptID(id, "main", 0, false, 2)
	h.agent.waitRunning(t, main)

	const other = "wf_0000000000000000:main.0:a1"
	agents := []string{h.node, storetest.Site}
	type command struct {
		agent, id string
		answered  bool
		// withdrawn: pending, of the attempt the cancel abandoned.
		withdrawn bool
	}
	var commands []command
	for _, agent := range agents {
		commands = append(commands,
			command{agent, main + ":answered", true, false},
			command{agent, cleanup + ":answered", true, false},
			command{agent, main + ":pending", false, true},
			command{agent, unrecorded, false, false},
			command{agent, other, false, false})
	}
	storetest.Update(t, h.store, func(tx *store.Tx) error {
		for _, c := range commands {
			if _, err := tx.EnqueueAgentCommand(c.agent, proto.RoleRamdisk, proto.Command{ID: c.id, Kind: proto.CommandTPMQuote, Payload: json.RawMessage(`{"nonce":"bm9uY2U="}`)}, nil); err != nil {
				return err
			}
			if c.answered {
				if _, err := tx.CompleteAgentCommand(c.agent, proto.Result{ID: c.id, Result: json.RawMessage(`{"eventLog":"AAAA"}`)}); err != nil {
					return err
				}
			}
		}
		return nil
	})

	storetest.Update(t, h.store, func(tx *store.Tx) error { _, err := h.engine.Cancel(tx, id); return err })
	h.engine.Abort(id)
	if run := h.waitEnd(id); run.State != store.RunFailed || run.Steps[1].State != store.StepFailed {
		t.Fatalf("the run: %s; want it failed, its cleanup failed at once", summary(run))
	}
	err := h.store.View(func(tx *store.Tx) error {
		for _, c := range commands {
			got, err := tx.AgentCommand(c.agent, c.id)
			switch {
			case c.id == other:
				if err != nil || got.Done {
					t.Errorf("%s/%s, of another run: %+v, %v; want it pending as it was", c.agent, c.id, got, err)
				}
			case c.withdrawn:
				if err != nil || got.Recorded == nil || got.Recorded.Workflow != id || got.Recorded.ErrorCode != proto.InvalidState {
					t.Errorf("%s/%s, pending in the attempt the cancel abandoned: recorded %+v, %v; want it withdrawn with INVALID_STATE, its digest recorded by %s", c.agent, c.id, got.Recorded, err, id)
				}
			case !c.answered:
				if proto.CodeOf(err) != proto.NotFound {
					t.Errorf("%s/%s, pending at the run's end: %+v, %v; want it dropped (NOT_FOUND)", c.agent, c.id, got, err)
				}
			case err != nil:
				t.Errorf("%s/%s: %v", c.agent, c.id, err)
			case got.Recorded == nil || got.Recorded.Workflow != id || len(got.Result)+len(got.Payload) > 0:
				t.Errorf("%s/%s, answered in an attempt the run abandoned: recorded %+v, %d bytes of answer and %d of payload; want only its digest, recorded by %s",
					c.agent, c.id, got.Recorded, len(got.Result), len(got.Payload), id)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
