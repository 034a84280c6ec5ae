package agentplane

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// TestARecordedCommandRunsNoMore relays a workflow step's command, which the node's
// agent answers; the run then records what it made of the answer
// (store.Tx.RecordAgentCommands), and the store keeps only its digest. A relay of the id
// after that (which a workflow never makes for a recorded step) is INVALID_STATE naming
// the run and step, at once: nothing is stored anew or sent, and a process of the node
// that connects after the answer (an agent restarted, a twin holding a copy of its
// certificate), which remembers no result of it, never runs it. On bbolt with the
// endpoint restarted between the record and the relay; on etcd with two replicas, the
// one that relays and records being another than the one holding the agent's session.
func TestARecordedCommandRunsNoMore(t *testing.T) {
	const node, id, run = "gpu-1", "wf_0123456789abcdef:main.4:a1:echo", "wf_0123456789abcdef"
	cmd := proto.Command{ID: id, Kind: "echo", Payload: raw(`"x"`)}
	for name, replicas := range map[string]func(t *testing.T) (holder, driver *env){
		"bbolt": func(t *testing.T) (*env, *env) {
			ca, server := newCA(t)
			e := startEnv(t, &env{t: t, ca: ca, server: server, dir: t.TempDir(), addr: "127.0.0.1:0"})
			return e, e
		},
		"etcd with two replicas": func(t *testing.T) (*env, *env) { r := etcdReplicas(t, 2); return r[0], r[1] },
	} {
		t.Run(name, func(t *testing.T) {
			holder, driver := replicas(t)
			process := func(name string) (*runs, func()) { return echoProcess(t, holder, node, id, name) }
			relay := func() (json.RawMessage, error) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				return driver.ep.Relay(ctx, node, proto.RoleNode, cmd)
			}

			ranFirst, stopFirst := process("first")
			if res, err := relay(); err != nil || string(res) != `"first"` {
				t.Fatalf("the step's relay: %s, %v; want the first process's answer", res, err)
			}
			if err := driver.st.Update(func(tx *store.Tx) error {
				_, err := tx.RecordAgentCommands(node, "wf_0123456789abcdef:main.4:a1", run, "steps[4]")
				return err
			}); err != nil {
				t.Fatal(err)
			}
			stopFirst()
			waitFor(t, "the first process's session to end", func() bool { return !holder.ep.Connected(node, proto.RoleNode) })
			if holder == driver {
				driver.stop()
				driver.start()
			}
			ranLater, stopLater := process("later")
			defer stopLater()

			res, err := relay()
			if proto.CodeOf(err) != proto.InvalidState || !strings.Contains(err.Error(), run) || !strings.Contains(err.Error(), "steps[4]") {
				t.Errorf("the recorded command relayed again: %s, %v; want INVALID_STATE naming %s and steps[4]", res, err, run)
			}
			c, err := commandStored(driver, node, id)
			if err != nil || c.Recorded == nil || len(c.Payload) > 0 || len(c.Result) > 0 {
				t.Errorf("the command as stored after the relay: %+v, %v; want it recorded, without payload or answer", c, err)
			}
			if p, err := pendingIDs(holder, node); err != nil || len(p) > 0 {
				t.Errorf("pending for the node: %v, %v; want nothing", p, err)
			}
			if n := ranFirst.get(id); n != 1 {
				t.Errorf("the first process ran %s %d times, want once", id, n)
			}
			if n := ranLater.get(id); n != 0 {
				t.Errorf("the process started after %s was recorded ran it %d times, want never", id, n)
			}
		})
	}
}
