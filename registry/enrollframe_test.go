package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
)

// TestANodesEnrollmentFitsItsNodeSpecsFrame: acme enrolls machines over HTTPS with what
// travels in a node's NodeSpec, one agent frame (proto.MaxFrame, 4 MiB): labels, and a
// driver's config, whose line separators (U+2028) take three bytes each in its request
// and six (\u2028) as the registry writes a label's value or a config's key. 8,200
// labels of 84 of them, or a power config keyed by 700,000 of them, make a request
// within what a call may send (2 MiB) and a NodeSpec past the frame. Each enrollment is
// refused, INVALID_INPUT at its path; the most labels a node may have, each of the
// longest name and value, and a config at its bound, make a NodeSpec that fits. Before,
// each was taken, and once a deploy gave the node its NodeSpec the push of it failed at
// every session of its installed OS's agent: the registry ended the session, the agent
// came back and was pushed it again, and the node never had its host configuration,
// with only a debug line for a cause.
func TestANodesEnrollmentFitsItsNodeSpecsFrame(t *testing.T) {
	f := startBusyFleet(t)
	acme := f.tenants["acme"]
	separators := strings.Repeat("\u2028", 84)
	var labels []string
	for i := range 8200 {
		labels = append(labels, fmt.Sprintf(`"%03x":"%s"`, i, separators))
	}
	cases := map[string]struct{ with, path string }{
		"labels":   {`"labels":{` + strings.Join(labels, ",") + `}`, "labels"},
		"a config": {`"drivers":{"power":{"driver":"redfish","config":{"` + strings.Repeat("\u2028", 700_000) + `":0}}}`, "drivers.power.config"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			mac := fmt.Sprintf("52:54:00:00:0c:%02x", len(tc.path))
			body := `{"pool":"gpu","macs":["` + mac + `"],"bmc":{"driver":"redfish","address":"https://10.0.0.7` + fmt.Sprint(len(tc.path)%10) + `"},` + tc.with + `}`
			var enrolled api.Node
			err := acme.Call(context.Background(), "metal.enroll", json.RawMessage(body), &enrolled)
			switch {
			case err == nil:
				t.Errorf("enrolling with %s of %d bytes that take twice as many in a NodeSpec: node %s; want INVALID_INPUT at %s", name, len(body), enrolled.ID, tc.path)
				f.pushedAtEveryHello(t, enrolled.ID)
			case proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != tc.path:
				t.Errorf("enrolling with %s of %d bytes that take twice as many in a NodeSpec: %.300v; want INVALID_INPUT at %s", name, len(body), err, tc.path)
			}
		})
	}

	most := map[string]string{}
	for i := range metal.MaxLabels {
		most[fmt.Sprintf("%03d", i)+strings.Repeat("n", 250)] = separators
	}
	n, err := call[api.Node](acme, "metal.enroll", api.EnrollRequest{Pool: "gpu", MACs: []string{"52:54:00:00:0c:ff"},
		BMC: api.BMC{Driver: "redfish", Address: "https://10.0.0.79"}, Labels: most,
		Drivers: map[string]api.Binding{"power": {Driver: "redfish", Config: json.RawMessage(`{"` + strings.Repeat("\u2028", (metal.MaxDriverConfig-64)/6) + `":0}`)}}})
	if err != nil {
		t.Fatalf("enrolling with the most labels a node may have and a config at its bound: %v", err)
	}
	var node store.Node
	f.must(f.r.st.View(func(tx *store.Tx) (err error) { node, err = tx.Node(n.ID); return err }), "reading the node")
	spec := metal.NodeSpec(node)
	if b, _ := proto.Marshal(&proto.Message{Type: proto.MsgSpec, Spec: &spec}); len(b) > proto.MaxFrame/8 {
		t.Errorf("the NodeSpec of a node with the most labels and a config at its bound takes %d bytes, more than an eighth of a frame", len(b))
	}
}

// pushedAtEveryHello gives node the NodeSpec a deploy's end gives it (metal.NodeSpec)
// and fails the test when its installed OS's agent, saying hello, is not pushed it.
func (f *busyFleet) pushedAtEveryHello(t *testing.T, node string) {
	f.must(f.r.st.Update(func(tx *store.Tx) error {
		n, err := tx.Node(node)
		if err != nil {
			return err
		}
		_, err = tx.SetNodeSpec(metal.NodeSpec(n))
		return err
	}), "storing the node's NodeSpec")
	creds, err := f.join(node, "node", f.mint(store.TokenProvisioned, node))
	f.must(err, "the installed OS's join")
	for hello := range 2 {
		c := dialCrafted(t, creds)
		c.write(c.session, `{"type":"hello","hello":{"observedGeneration":0}}`)
		b, err := c.read(c.session)
		if m, _ := proto.DecodeMessage(b); err != nil || m.Type != proto.MsgSpec {
			t.Errorf("hello %d of the agent of a node enrolled so: %.100s, %v; want its NodeSpec pushed", hello+1, b, err)
		}
	}
}
