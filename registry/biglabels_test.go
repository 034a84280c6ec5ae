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

// TestANodesLabelsFitItsNodeSpecsFrame: acme enrolls a machine over HTTPS with labels
// whose values are line separators (U+2028), three bytes each in its request, which
// every JSON encoder of the registry writes as six (\u2028): 8,200 labels of 84 of them
// make a request within what a call may send (2 MiB) and a node NodeSpec of 4.02 MiB,
// past what an agent frame carries. The enrollment is refused, INVALID_INPUT at labels;
// the most labels a node may have, each of the longest name and value, make a NodeSpec
// that fits. Before, the enrollment was taken, and once a deploy gave the node its
// NodeSpec the push of it failed at every session of its installed OS's agent: the
// registry ended the session, the agent came back and was pushed it again, and the
// node never had its host configuration, with only a debug line for a cause.
func TestANodesLabelsFitItsNodeSpecsFrame(t *testing.T) {
	f := startBusyFleet(t)
	acme := f.tenants["acme"]
	separators := strings.Repeat("\u2028", 84)
	var labels []string
	for i := range 8200 {
		labels = append(labels, fmt.Sprintf(`"%03x":"%s"`, i, separators))
	}
	body := `{"pool":"gpu","macs":["52:54:00:00:0c:01"],"bmc":{"driver":"redfish","address":"https://10.0.0.71"},"labels":{` + strings.Join(labels, ",") + `}}`
	var enrolled api.Node
	err := acme.Call(context.Background(), "metal.enroll", json.RawMessage(body), &enrolled)
	switch {
	case err == nil:
		t.Errorf("enrolling with %d bytes of labels that take twice as many in a NodeSpec: node %s; want INVALID_INPUT at labels", len(body), enrolled.ID)
		f.pushedAtEveryHello(enrolled.ID)
	case proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "labels":
		t.Errorf("enrolling with %d bytes of labels that take twice as many in a NodeSpec: %v; want INVALID_INPUT at labels", len(body), err)
	}

	most := map[string]string{}
	for i := range metal.MaxLabels {
		most[fmt.Sprintf("%03d", i)+strings.Repeat("n", 250)] = separators
	}
	n, err := call[api.Node](acme, "metal.enroll", api.EnrollRequest{Pool: "gpu", MACs: []string{"52:54:00:00:0c:02"},
		BMC: api.BMC{Driver: "redfish", Address: "https://10.0.0.72"}, Labels: most})
	if err != nil {
		t.Fatalf("enrolling with the most labels a node may have: %v", err)
	}
	var node store.Node
	f.must(f.r.st.View(func(tx *store.Tx) (err error) { node, err = tx.Node(n.ID); return err }), "reading the node")
	spec := metal.NodeSpec(node)
	if b, _ := proto.Marshal(&proto.Message{Type: proto.MsgSpec, Spec: &spec}); len(b) > proto.MaxFrame/8 {
		t.Errorf("the NodeSpec of a node with the most labels takes %d bytes, more than an eighth of a frame", len(b))
	}
}

// pushedAtEveryHello gives node the NodeSpec a deploy's end gives it (metal.NodeSpec)
// and fails the test when its installed OS's agent, saying hello, is not pushed it.
func (f *busyFleet) pushedAtEveryHello(node string) {
	t := f.t
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
