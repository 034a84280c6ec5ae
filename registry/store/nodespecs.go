package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/better-compute/better-compute/proto"
)

const bucketNodeSpecs = "nodespecs"

// hostOfNode is what a stored NodeSpec holds as its host section when that section is
// its node's desired host section (Node.Host), which NodeSpec reads in its place. A
// deploy's end writes the section to both: kept in both, a section of 1 MB made that
// transaction 2 MB, more than an etcd cluster takes in one request by default. A string
// where a list belongs: a registry of an earlier version fails to read such a NodeSpec
// rather than pushing it without its host section.
const hostOfNode = "node"

// nodeSpecRecord is a NodeSpec as stored: its host section, or hostOfNode. Host hides
// NodeSpec.Host, which the record never holds.
type nodeSpecRecord struct {
	proto.NodeSpec
	Host json.RawMessage `json:"host,omitempty"`
}

// OnNodeSpec registers fn to be called after every commit that changed a node's spec,
// with the node id and the new generation, until the returned cancel is called. fn runs
// on the committing goroutine after the store's locks are released, so it must return
// quickly (signal, do not work). On etcd it also runs for every NodeSpec another replica
// changed, on the store's watch goroutine: at least once, in commit order.
func (s *Store) OnNodeSpec(fn func(node string, generation int64)) (cancel func()) {
	return s.watch.nodeSpec.add(func(rec nodeSpecRecord) { fn(rec.Node, rec.Generation) })
}

// SetNodeSpec stores spec as its node's desired state and returns it as stored. The
// registry owns the generation: spec.Generation is ignored, and the stored one is the
// previous generation plus one (1 for a new node), unless nothing but the generation
// differs from the stored spec, which is then kept as it is. After the commit, the
// OnNodeSpec hooks learn of a change. A host section that is the node's desired one
// (Node.HostSection) is stored once, in the node's record (hostOfNode). A spec whose
// push would take more than an agent frame is INVALID_INPUT, nothing written
// (checkNodeSpecFits).
func (t *Tx) SetNodeSpec(spec proto.NodeSpec) (proto.NodeSpec, error) {
	spec.Generation = 0
	if err := spec.Validate(); err != nil {
		return proto.NodeSpec{}, err
	}
	old, err := t.NodeSpec(spec.Node)
	if err != nil && proto.CodeOf(err) != proto.NotFound {
		return proto.NodeSpec{}, err
	}
	if err == nil {
		spec.Generation = old.Generation
		same, err := equalJSON(old, spec)
		if err != nil || same {
			return old, err
		}
	}
	spec.Generation++
	if err := checkNodeSpecFits(old, spec); err != nil {
		return proto.NodeSpec{}, err
	}
	ofNode, err := t.hostIsNodes(spec)
	if err != nil {
		return proto.NodeSpec{}, err
	}
	rec, err := t.putNodeSpec(spec, ofNode)
	if err != nil {
		return proto.NodeSpec{}, err
	}
	t.store.watch.nodeSpec.afterCommit(t, rec)
	return spec, nil
}

// checkNodeSpecFits refuses spec, to follow old (zero when the node has none), when its
// push takes more than an agent frame (proto.MaxFrame): INVALID_INPUT, reason too-large,
// at the section that grew the most over old. Stored, such a spec failed at every push,
// which ended the agent's session, and the agent's next hello had it pushed again, for
// ever; refused here, the node keeps the spec it has and the change's writer learns why.
func checkNodeSpecFits(old, spec proto.NodeSpec) error {
	body, err := proto.Marshal(&proto.Message{Type: proto.MsgSpec, Spec: &spec})
	if err != nil || len(body) <= proto.MaxFrame {
		return err
	}
	path, grew := "", -1
	for _, sec := range []struct {
		path     string
		old, new any
	}{
		{"labels", old.Labels, spec.Labels},
		{"drivers", old.Drivers, spec.Drivers},
		{"host", old.Host, spec.Host},
		{"site", old.Site, spec.Site},
	} {
		if g := jsonSize(sec.new) - jsonSize(sec.old); g > grew {
			path, grew = sec.path, g
		}
	}
	return proto.Errorf(proto.InvalidInput, "the NodeSpec of node %s would take %d bytes as pushed, more than the %d bytes an agent frame carries (proto.MaxFrame): its %s grew by %d bytes; the node keeps the NodeSpec it has",
		spec.Node, len(body), proto.MaxFrame, path, grew).WithPath(path).WithReason(proto.ReasonTooLarge)
}

// jsonSize is the length of v's JSON, 0 when it has none.
func jsonSize(v any) int {
	b, _ := proto.Marshal(v)
	return len(b)
}

// hostIsNodes reports whether spec, a node's installed agent's, carries its node's
// desired host section (Node.HostSection), the same JSON.
func (t *Tx) hostIsNodes(spec proto.NodeSpec) (bool, error) {
	if spec.Role != proto.RoleNode || len(spec.Host) == 0 {
		return false, nil
	}
	n, err := t.Node(spec.Node)
	if proto.CodeOf(err) == proto.NotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return equalJSON(n.HostSection(), spec.Host)
}

// putNodeSpec writes spec, its host section replaced by hostOfNode when ofNode, and
// returns the record written.
func (t *Tx) putNodeSpec(spec proto.NodeSpec, ofNode bool) (nodeSpecRecord, error) {
	// The host section is written by the record's own encoder, which keeps its text as
	// it is (encodeRecord): not as a json.RawMessage of encoding/json's Marshal, which
	// escapes <, > and &.
	rec := struct {
		proto.NodeSpec
		Host any `json:"host,omitempty"`
	}{NodeSpec: spec}
	rec.NodeSpec.Host = nil
	switch {
	case ofNode:
		rec.Host = hostOfNode
	case len(spec.Host) > 0:
		rec.Host = spec.Host
	}
	return nodeSpecRecord{NodeSpec: rec.NodeSpec}, t.put(bucketNodeSpecs, []byte(spec.Node), rec)
}

// NodeSpec returns a node's desired state, NOT_FOUND when it has none.
func (t *Tx) NodeSpec(node string) (proto.NodeSpec, error) {
	spec, ofNode, err := t.storedNodeSpec(node)
	if err != nil || !ofNode {
		return spec, err
	}
	n, err := t.Node(node)
	if err != nil {
		return proto.NodeSpec{}, fmt.Errorf("store: the NodeSpec of node %s takes its host section from the node's record: %w", node, err)
	}
	spec.Host = n.HostSection()
	return spec, nil
}

// storedNodeSpec reads node's NodeSpec as stored: ofNode when its host section is its
// node's (hostOfNode), and then without it.
func (t *Tx) storedNodeSpec(node string) (spec proto.NodeSpec, ofNode bool, err error) {
	var rec nodeSpecRecord
	ok, err := t.get(bucketNodeSpecs, []byte(node), &rec)
	if err == nil && !ok {
		err = notFound("NodeSpec of node", node)
	}
	if err != nil {
		return proto.NodeSpec{}, false, err
	}
	if len(rec.Host) > 0 && rec.Host[0] == '"' {
		var ref string
		if err := json.Unmarshal(rec.Host, &ref); err != nil || ref != hostOfNode {
			return proto.NodeSpec{}, false, fmt.Errorf("store: %s/%s: a host section of %s, not a list of units nor %q", bucketNodeSpecs, node, rec.Host, hostOfNode)
		}
		return rec.NodeSpec, true, nil
	}
	if len(rec.Host) > 0 {
		if err := json.Unmarshal(rec.Host, &rec.NodeSpec.Host); err != nil {
			return proto.NodeSpec{}, false, fmt.Errorf("store: %s/%s: %w", bucketNodeSpecs, node, err)
		}
	}
	return rec.NodeSpec, false, nil
}

// keepNodeSpecHost gives the NodeSpec of node old, whose desired host section changes,
// the section it took from the node as its own: a NodeSpec changes only through
// SetNodeSpec, at a new generation.
func (t *Tx) keepNodeSpecHost(old Node) error {
	spec, ofNode, err := t.storedNodeSpec(old.ID)
	if proto.CodeOf(err) == proto.NotFound || err == nil && !ofNode {
		return nil
	}
	if err != nil {
		return err
	}
	spec.Host = old.HostSection()
	_, err = t.putNodeSpec(spec, false)
	return err
}

// HostSection is the node's desired host section as its installed agent's NodeSpec
// carries it; nil when it has none.
func (n Node) HostSection() []proto.HostUnit {
	var host []proto.HostUnit
	for _, u := range n.Host {
		host = append(host, proto.HostUnit{Unit: u.Unit, Settings: u.Settings})
	}
	return host
}

// sameHost reports whether two host sections are the same units of the same bytes.
func sameHost(a, b []HostUnit) bool {
	return slices.EqualFunc(a, b, func(x, y HostUnit) bool { return x.Unit == y.Unit && bytes.Equal(x.Settings, y.Settings) })
}

func equalJSON(a, b any) (bool, error) {
	ja, err := json.Marshal(a)
	if err != nil {
		return false, err
	}
	jb, err := json.Marshal(b)
	return bytes.Equal(ja, jb), err
}
