package agentplane

import (
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"go.etcd.io/bbolt"
)

// TestAStoredNodeSpecPastTheFrameKeepsTheSession: a node's NodeSpec whose push takes more
// than an agent frame, stored by an earlier release (this one's store refuses it,
// store.Tx.SetNodeSpec), is not pushed: the registry logs one error naming the node and
// the message's size, the agent's session goes on, and the node's next NodeSpec, which
// fits, is pushed on that same session. Before, the write failed as a failed link: the
// registry ended the session, and the agent's next hello had it pushed again, for ever.
// On bbolt, the record written into the stopped registry's file, real QUIC and a real
// agent session.
func TestAStoredNodeSpecPastTheFrameKeepsTheSession(t *testing.T) {
	const node = "gpu-1"
	logs := &records{}
	var hellos, ends atomic.Int64
	ca, server := newCA(t)
	e := startEnv(t, &env{t: t, ca: ca, server: server, dir: t.TempDir(), addr: "127.0.0.1:0", log: slog.New(logs),
		hooks: agents.Config{
			OnSession:    func(string, proto.Role, time.Time, string) error { hellos.Add(1); return nil },
			OnSessionEnd: func(string, proto.Role, time.Time, time.Time) { ends.Add(1) },
		}})
	e.setSpec(node, map[string]string{"rack": "r1"})
	e.stop()
	size := storeAsEarlier(t, filepath.Join(e.dir, store.FileName), node, strings.Repeat("a", proto.MaxFrame))
	e.start()

	// A keep-alive of seconds, not the harness's 100 ms: the agent's session outlives the
	// pause a loaded machine may take marshalling 4 MiB, so any reconnect is the registry's.
	a := e.startAgent(node, func(c *session.Config) { c.KeepAlive = 5 * time.Second })
	waitFor(t, "the NodeSpec past the frame refused, or the session ended", func() bool {
		return logs.count(slog.LevelError, tooLargeLog) > 0 || ends.Load() > 0
	})
	if n := ends.Load(); n > 0 {
		t.Fatalf("the push of a NodeSpec of %d bytes ended the agent's session (%d ended, %d hellos): it would be pushed again at every hello", size, n, hellos.Load())
	}
	next := e.setSpec(node, map[string]string{"rack": "r2"})
	waitFor(t, "the next NodeSpec applied", func() bool { return a.lastApplied().Generation == next })
	waitFor(t, "the push window empty", func() bool { return e.ep.PushWindow().InFlight == 0 })
	if h, n := hellos.Load(), ends.Load(); h != 1 || n != 0 {
		t.Fatalf("%d hellos and %d sessions ended, want the one session kept", h, n)
	}
	logged := logs.matching(slog.LevelError, tooLargeLog)
	if len(logged) != 1 {
		t.Fatalf("%d errors logged for the NodeSpec past the frame, want 1", len(logged))
	}
	if got := logged[0]; got["node"] != node || got["generation"] != "1" || got["bytes"] != strconv.Itoa(size) {
		t.Fatalf("logged %v, want node %s, generation 1, bytes %d", got, node, size)
	}
}

// tooLargeLog begins the registry's error for a NodeSpec not pushed for its size.
const tooLargeLog = "NodeSpec too large for an agent frame, not pushed"

// storeAsEarlier gives the NodeSpec of node, in the bbolt file path of a stopped
// registry, a label "big" of value, written straight into its record as a release before
// store.Tx.SetNodeSpec bounded it stored it, and returns the size of its message as pushed.
func storeAsEarlier(t *testing.T, path, node, value string) int {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var spec proto.NodeSpec
	err = db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("nodespecs"))
		rec := b.Get([]byte(node)) // the schema byte, then the JSON
		if err := json.Unmarshal(rec[1:], &spec); err != nil {
			return err
		}
		spec.Labels["big"] = value
		text, err := proto.Marshal(spec)
		if err != nil {
			return err
		}
		return b.Put([]byte(node), append([]byte{rec[0]}, text...))
	})
	if err != nil {
		t.Fatal(err)
	}
	body, err := proto.Marshal(&proto.Message{Type: proto.MsgSpec, Spec: &spec})
	if err != nil {
		t.Fatal(err)
	}
	return len(body)
}
