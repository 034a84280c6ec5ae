package session

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
	"github.com/quic-go/quic-go"
)

// TestAnotherTenantCannotWashOutAResult is the attack on a site agent: acme's power cycle
// is answered, its answer lost with the connection; beta then makes more commands end than
// the agent keeps for a tenant (its own BMCs' power.getPower, cheap and fast); the
// registry resends acme's command with the same id. The resend gets the remembered answer
// and the cycle ran once.
func TestAnotherTenantCannotWashOutAResult(t *testing.T) {
	ln, _, cfg := bareRegistry(t, nil, nil)
	cfg.Log, cfg.Backoff = slog.New(slog.DiscardHandler), Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}
	var mu sync.Mutex
	cycles := 0
	cycling, release := make(chan struct{}), make(chan struct{})
	cfg.Handlers = map[string]Handler{
		proto.CommandSetPower: func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			mu.Lock()
			cycles++
			first := cycles == 1
			mu.Unlock()
			if first {
				close(cycling)
				<-release
			}
			return json.RawMessage(`"cycled"`), nil
		},
		proto.CommandGetPower: func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`"On"`), nil
		},
	}
	runAgent(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	accept := func() *quic.Conn {
		t.Helper()
		conn, err := ln.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}
	send := func(conn *quic.Conn, cmd proto.Command) *quic.Stream {
		t.Helper()
		s, err := conn.OpenStreamSync(ctx)
		if err == nil {
			err = proto.WriteMessage(s, &proto.Message{Type: proto.MsgCommand, Command: &cmd})
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	answer := func(s *quic.Stream) string {
		t.Helper()
		m, err := proto.ReadMessage(s)
		if err != nil || m.Type != proto.MsgResult || m.Result.Error != nil {
			t.Fatalf("answer: %+v, %v", m, err)
		}
		s.Close()
		return string(m.Result.Result)
	}
	cycle := proto.Command{ID: "wf_1:cycle", Kind: proto.CommandSetPower, Tenant: "acme", Payload: json.RawMessage(`{"action":"PowerCycle"}`)}

	first := accept()
	send(first, cycle)
	<-cycling
	first.CloseWithError(0, "the link drops") // before the registry read the answer
	close(release)

	second := accept()
	defer second.CloseWithError(0, "")
	for i := range DefaultKeepResults + 44 {
		s := send(second, proto.Command{ID: fmt.Sprintf("wf_2:get-%d", i), Kind: proto.CommandGetPower, Tenant: "beta"})
		if got := answer(s); got != `"On"` {
			t.Fatalf("beta's command %d: %s", i, got)
		}
	}
	if got := answer(send(second, cycle)); got != `"cycled"` {
		t.Fatalf("acme's resend: %s, want the remembered answer", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if cycles != 1 {
		t.Errorf("acme's power cycle ran %d times, want once", cycles)
	}
}

// TestKeptResults: a tenant's own last keep results are kept whatever the others run;
// past that, results are kept up to keptShares*keep in all, over which the tenant
// holding the most forgets its oldest.
func TestKeptResults(t *testing.T) {
	const keep = 2
	runs := map[string]int{}
	handlers := map[string]Handler{"k": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
		var id string
		json.Unmarshal(p, &id)
		runs[id]++
		return p, nil
	}}
	var c commands
	c.init(keep)
	run := func(tenant string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if _, _, ok := c.do(context.Background(), proto.Command{ID: id, Kind: "k", Tenant: tenant, Payload: json.RawMessage(`"` + id + `"`)}, handlers, nil); !ok {
				t.Fatalf("%s: no result", id)
			}
		}
	}
	ids := func(prefix string, from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("%s%d", prefix, i))
		}
		return out
	}
	remembered := func(id string) bool { _, ok := c.runs[id]; return ok }

	// Under the bound, a tenant keeps more than its own keep.
	run("acme", ids("a", 0, 3)...)
	// beta's flood evicts only beta's own: it holds the most.
	run("beta", ids("b", 0, 100)...)
	if diff := cmp.Diff(map[string]int{"acme": 3, "beta": keptShares*keep - 3}, c.held); diff != "" {
		t.Errorf("held after beta's flood (-want +got):\n%s", diff)
	}
	for _, id := range ids("a", 0, 3) {
		if !remembered(id) {
			t.Errorf("beta's flood made the agent forget acme's %s", id)
		}
	}
	run("acme", ids("a", 0, 3)...)
	if diff := cmp.Diff(map[string]int{"a0": 1, "a1": 1, "a2": 1}, map[string]int{"a0": runs["a0"], "a1": runs["a1"], "a2": runs["a2"]}); diff != "" {
		t.Errorf("runs of acme's resent commands (-want +got):\n%s", diff)
	}
	if remembered("b0") || !remembered("b99") {
		t.Errorf("beta's oldest remembered %v, newest %v: want its oldest forgotten, its newest kept", remembered("b0"), remembered("b99"))
	}

	// acme now adds: the tenant holding the most gives up one each time, until both hold
	// their share.
	run("acme", ids("a", 3, 100)...)
	if diff := cmp.Diff(map[string]int{"acme": keptShares * keep / 2, "beta": keptShares * keep / 2}, c.held); diff != "" {
		t.Errorf("held after acme's flood (-want +got):\n%s", diff)
	}

	// Never below a tenant's own keep: more tenants than the bound holds keep keep each.
	var all []string
	for i := range keptShares + 4 {
		tenant := fmt.Sprintf("t%d", i)
		run(tenant, ids(tenant+"-", 0, keep)...)
		all = append(all, ids(tenant+"-", 0, keep)...)
	}
	for _, id := range all {
		if !remembered(id) {
			t.Errorf("%s forgotten: a tenant holding no more than its own keep lost one", id)
		}
	}
	if c.held["acme"] != keep || c.held["beta"] != keep {
		t.Errorf("held %v: acme and beta, holding the most, should be down to their own keep", c.held)
	}
	if c.kept != len(c.runs) {
		t.Errorf("kept %d, runs %d", c.kept, len(c.runs))
	}
}
