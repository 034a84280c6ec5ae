package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
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
