package registry

import (
	"context"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestACommandGivenUpIsNeverSentAgain: a machine's agent is connected, over real QUIC,
// and a command relayed to it stays pending, its delivery ended without an answer (the
// agent answered on its stream with another command's id) and its caller gone. The
// step that relayed it gives it up (its timeout ran out while the registry was down)
// and relays it with its context ended with that reason, as a resumed attempt does: the
// relay is TIMEOUT, the command is recorded withdrawn, and the agent is sent nothing. So
// is a command given up before it was ever stored: none is stored. Before, the relay
// sent the pending command to the agent again, and stored and sent the new one, only to
// withdraw each a moment later: a command whose step had given it up (a power action
// past its step's timeout) reached the agent.
func TestACommandGivenUpIsNeverSentAgain(t *testing.T) {
	f := serveBusy(t, Config{})
	storetest.Fill(t, f.r.st)
	node, creds := f.provisioned("52:54:00:00:07:21")
	ep := f.r.plane.ep
	c := dialCrafted(t, creds)
	c.write(c.session, `{"type":"hello","hello":{"observedGeneration":0}}`)
	f.wait("the agent's session", func() bool { return ep.Connected(node, proto.RoleNode) })

	waiting, leave := context.WithCancel(t.Context())
	relayed := make(chan error, 1)
	go func() {
		_, err := ep.Relay(waiting, node, proto.RoleNode, proto.Command{ID: "given-up", Kind: "echo", Payload: []byte(`"cycle"`)})
		relayed <- err
	}()
	s, cmd := c.command()
	if cmd.ID != "given-up" {
		t.Fatalf("the agent was sent %s", cmd.ID)
	}
	c.write(s, `{"type":"result","result":{"id":"another","result":"done"}}`)
	s.Close()
	c.read(s) // until the registry ends the stream of the answer it refused
	leave()
	if err := <-relayed; proto.CodeOf(err) != proto.Timeout {
		t.Fatalf("the relay its caller left: %v, want TIMEOUT", err)
	}
	if stored, err := f.agentCommand(node, "given-up"); err != nil || stored.Done {
		t.Fatalf("the command whose delivery failed: done %v (%v), want it pending", stored.Done, err)
	}
	time.Sleep(200 * time.Millisecond) // the failed delivery's goroutine ends with its stream

	gone, giveUp := context.WithCancelCause(context.Background())
	giveUp(proto.Errorf(proto.Timeout, "the step's timeout of 2s ran out"))
	for _, id := range []string{"given-up", "never-stored"} {
		_, err := ep.Relay(gone, node, proto.RoleNode, proto.Command{ID: id, Kind: "echo", Payload: []byte(`"cycle"`)})
		if proto.CodeOf(err) != proto.Timeout {
			t.Errorf("relaying %s given up: %v, want TIMEOUT", id, err)
		}
	}
	if stored, err := f.agentCommand(node, "given-up"); err != nil || !stored.Done || stored.Error == nil || stored.Error.Code != proto.Timeout {
		t.Errorf("the command given up: %+v (%v), want it withdrawn with TIMEOUT", stored, err)
	}
	if stored, err := f.agentCommand(node, "never-stored"); proto.CodeOf(err) != proto.NotFound {
		t.Errorf("the command given up before it was stored: %+v (%v), want none stored", stored, err)
	}
	sent, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	for {
		s, err := c.conn.AcceptStream(sent)
		if err != nil {
			break
		}
		b, err := c.read(s) // the command, or the stream's reset if its withdrawal came first
		t.Errorf("the agent was sent a command its step had given up: %s (%v)", b, err)
	}
}
