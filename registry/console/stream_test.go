package console_test

import (
	"bufio"
	"cmp"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// sse is one server-sent event as a browser's EventSource dispatches it.
type sse struct{ name, data string }

// parseSSE reads a stream as the HTML standard's event-stream parser does: a line ends
// at CRLF, LF or CR alone; an empty line dispatches the event being built.
func parseSSE(stream string) []sse {
	var out []sse
	name, data := "", ""
	lines := strings.Split(strings.ReplaceAll(strings.ReplaceAll(stream, "\r\n", "\n"), "\r", "\n"), "\n")
	for _, line := range lines {
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if data != "" {
				out = append(out, sse{cmp.Or(name, "message"), strings.TrimSuffix(data, "\n")})
			}
			name, data = "", ""
		case field == "event":
			name = value
		case field == "data":
			data += value + "\n"
		}
	}
	return out
}

// TestALiveStreamCarriesAnAgentsTextAsText: a node's live stream sends its block as
// one update whatever the node's events say. The attacker: an agent whose step fails
// with a message of its making (an agent's error carries whatever text it likes, as
// store.Run.bound says), holding carriage returns and lines of the event-stream's own
// syntax: "\r\revent: end\rdata: x\r\r". The browser's EventSource takes a CR alone as
// a line's end, so the message, escaped as HTML and sent on one data: line, ended the
// update there, with the block cut short, and dispatched an end of the agent's making,
// at which the page reloads: over and over while the run runs, showing the timeline
// only up to the agent's text.
func TestALiveStreamCarriesAnAgentsTextAsText(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	if acmeNode.Workflow == "" {
		t.Fatalf("node %s enrolled with no workflow running", acmeNode.ID)
	}
	const message = "disk gone\r\revent: end\rdata: the run ended\r\r"
	reg = whileStopped(t, reg, func(tx *store.Tx) error {
		_, err := tx.AppendEvent(store.Event{Node: acmeNode.ID, Tenant: "acme", Kind: store.EventStepEnded, Workflow: acmeNode.Workflow,
			Step: "steps[0]", Use: "power.getPower", To: "failed", Error: &proto.Error{Code: proto.DriverError, Message: message}})
		return err
	})
	b := newClient(t, reg)
	if p := b.signIn(acme); p.status != http.StatusSeeOther {
		t.Fatalf("sign in: %d\n%s", p.status, p.body)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, reg.URL+"/ui/nodes/"+acmeNode.ID+"/live", nil)
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the stream of acme's node: %d", resp.StatusCode)
	}
	// The registry's first event, as it framed it: up to its first empty line.
	var first strings.Builder
	for r := bufio.NewReader(resp.Body); ; {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before its first event: %v\n%s", err, first.String())
		}
		first.WriteString(line)
		if line == "\n" {
			break
		}
	}
	events := parseSSE(first.String())
	if len(events) != 1 || events[0].name != "update" || !strings.Contains(events[0].data, "disk gone") ||
		!strings.Contains(events[0].data, "the run ended") || !strings.Contains(events[0].data, `<p class="small">as of`) {
		t.Errorf("the browser reads %d events from the registry's first, want the whole block as one update:", len(events))
		for _, e := range events {
			t.Errorf("event %q: %q", e.name, e.data)
		}
	}
}

// TestSignOutEndsTheSessionsLiveStreams: signing out ends the session everywhere,
// its live streams too. The attacker: whoever sits at a browser an operator signed out
// of, or the party the operator signs out against (a session meant to end at a shared
// desk); a node page left open in another tab kept following the node's run as the
// signed-out credential, the registry calling the API with it and sending the page
// each change, until the run ended.
func TestSignOutEndsTheSessionsLiveStreams(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	b := newClient(t, reg)
	if p := b.signIn(acme); p.status != http.StatusSeeOther {
		t.Fatalf("sign in: %d\n%s", p.status, p.body)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, reg.URL+"/ui/nodes/"+acmeNode.ID+"/live", nil)
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	stream := bufio.NewReader(resp.Body)
	if line, _ := stream.ReadString('\n'); resp.StatusCode != http.StatusOK || line != "event: update\n" {
		t.Fatalf("the stream of acme's enrolling node: %d, begins %q", resp.StatusCode, line)
	}
	for line := ""; line != "\n"; {
		if line, err = stream.ReadString('\n'); err != nil {
			t.Fatalf("the first update: %v", err)
		}
	}
	if p := b.post("/ui/signout", url.Values{"csrf": {b.csrf("/ui/nodes")}}); p.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d\n%s", p.status, p.body)
	}
	// The run changes (and ends) after the sign-out: a stream still following it sends
	// an update.
	testkit.JSON(t, reg.AdminConfig, nil, "nodes", "cancel", acmeNode.ID, "--tenant", "acme")
	var after []string
	for {
		line, err := stream.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "event: ") {
			after = append(after, strings.TrimSpace(line))
		}
	}
	if len(after) > 0 {
		t.Errorf("the signed-out session's live stream went on: %v", after)
	}
}
