package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestAnAgentKeepsOnlyItsRolesSections: the root user of a tenant's installed machine
// holds its `bcd node` key and runs an agent of its own over real QUIC. It reports
// inventory sections of 1 MiB under names of its making, 3 in its hello and 32 on its
// session, each time followed by its `host` section. The registry keeps the `host`
// section and none of the others: before, it stored every one, so one machine's key
// could fill the store the registry shares with every tenant, without bound.
func TestAnAgentKeepsOnlyItsRolesSections(t *testing.T) {
	m := newRoleMachine(t, "52:54:00:00:08:11")
	f, node := m.f, m.node
	big := json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`)
	const inHello, onSession = 3, 32 // a hello is one frame: at most 4 MiB

	agent := f.newAgent(node, m.nodeCreds)
	s := agent.start()
	for i := range inHello {
		s.SetInventory(fmt.Sprintf("hello-%02d", i), big) // not connected yet: the hello carries them
	}
	s.SetInventory(proto.SectionHost, json.RawMessage(`{"round":1}`))
	end := agent.session(context.Background(), s)
	defer func() { end() }()
	f.wait("the hello's host section", func() bool { return f.inventorySection(node, proto.SectionHost) == `{"round":1}` })
	for i := range onSession {
		s.SetInventory(fmt.Sprintf("session-%02d", i), big)
	}
	s.SetInventory(proto.SectionHost, json.RawMessage(`{"round":2}`))
	f.wait("the session's host section", func() bool { return f.inventorySection(node, proto.SectionHost) == `{"round":2}` })

	var kept []string
	f.must(f.r.st.View(func(tx *store.Tx) error {
		sections, err := tx.Inventory(node)
		for _, sec := range sections {
			kept = append(kept, sec.Section)
		}
		return err
	}), "reading the inventory")
	for _, sec := range kept {
		if proto.CheckInventorySection(proto.RoleNode, sec, "") != nil {
			t.Errorf("the registry keeps the node agent's section %q (sections kept: %d)", sec, len(kept))
		}
	}
	if !slices.Contains(kept, proto.SectionHost) {
		t.Errorf("sections kept %v: want host", kept)
	}
}

// TestAHelloOfSectionsWithoutBoundIsRefused: the root user of a tenant's installed
// machine holds its `bcd node` key and runs an agent of its own over real QUIC. It says
// hello with its `host` section beside 100,000 sections of a byte each, then beside one
// section named by 1 MiB. The registry refuses each hello as it reads it (the agent's
// session closed with its reason naming hello.inventory), stores nothing of it (neither
// the `host` section nor the session) and logs a warning naming the node; the machine's
// well-formed hello is then recorded as before. Before, the registry took both hellos:
// it checked each of the 100,000 sections against its role's list (an error made for
// each), warned of them once, and stored the `host` section and the session.
func TestAHelloOfSectionsWithoutBoundIsRefused(t *testing.T) {
	warns := &refusals{from: slog.LevelWarn}
	f := serveBusy(t, Config{Log: slog.New(warns)})
	storetest.Fill(t, f.r.st)
	node, creds := f.provisioned("52:54:00:00:08:12")
	host := json.RawMessage(`{"generation":0}`)
	many := map[string]json.RawMessage{}
	for i := range 100_000 {
		many[fmt.Sprintf("s%05d", i)] = json.RawMessage(`0`)
	}
	for name, extra := range map[string]map[string]json.RawMessage{
		"100,000 sections":         many,
		"a section named by 1 MiB": {strings.Repeat("a", 1<<20): json.RawMessage(`0`)},
	} {
		t.Run(name, func(t *testing.T) {
			closes := &refusals{from: slog.LevelInfo}
			agent := f.newAgent(node, creds)
			agent.log = slog.New(closes)
			s := agent.start()
			for section, data := range extra {
				s.SetInventory(section, data)
			}
			s.SetInventory(proto.SectionHost, host)
			before := warns.count("node=" + node)
			end := agent.session(context.Background(), s)
			f.wait("the hello refused or recorded", func() bool {
				return closes.count("(at hello.inventory)") > 0 || f.inventorySection(node, proto.SectionHost) != ""
			})
			end()
			if got := f.inventorySection(node, proto.SectionHost); got != "" {
				t.Errorf("the registry stored the host section %s of the hello", got)
			}
			if closes.count("expected a hello: INVALID_INPUT") == 0 {
				t.Errorf("the agent's session was not closed with the hello refused at hello.inventory; it logged %q", closes.reasons)
			}
			if warns.count("node="+node) == before || warns.count("hello.inventory") == 0 {
				t.Errorf("the registry warned of no refused hello of node %s; it warned %q", node, warns.reasons)
			}
			if f.r.plane.ep.Connected(node, proto.RoleNode) {
				t.Error("the registry holds the session of the refused hello")
			}
		})
	}

	agent := f.newAgent(node, creds)
	s := agent.start()
	s.SetInventory(proto.SectionHost, host)
	end := agent.session(context.Background(), s)
	defer end()
	f.wait("the well-formed hello's host section", func() bool { return f.inventorySection(node, proto.SectionHost) == string(host) })
}
