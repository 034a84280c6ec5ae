package store

import (
	"bytes"
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
)

const bucketNodeSpecs = "nodespecs"

// OnNodeSpec registers fn to be called after every commit that changed a node's spec,
// with the node id and the new generation, until the returned cancel is called. fn runs
// on the committing goroutine after the store's locks are released, so it must return
// quickly (signal, do not work). On etcd it also runs for every NodeSpec another replica
// changed, on the store's watch goroutine: at least once, in commit order.
func (s *Store) OnNodeSpec(fn func(node string, generation int64)) (cancel func()) {
	return s.watch.nodeSpec.add(func(spec proto.NodeSpec) { fn(spec.Node, spec.Generation) })
}

// SetNodeSpec stores spec as its node's desired state and returns it as stored. The
// registry owns the generation: spec.Generation is ignored, and the stored one is the
// previous generation plus one (1 for a new node), unless nothing but the generation
// differs from the stored spec, which is then kept as it is. After the commit, the
// OnNodeSpec hooks learn of a change.
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
	if err := t.put(bucketNodeSpecs, []byte(spec.Node), spec); err != nil {
		return proto.NodeSpec{}, err
	}
	t.store.watch.nodeSpec.afterCommit(t, spec)
	return spec, nil
}

// NodeSpec returns a node's desired state, NOT_FOUND when it has none.
func (t *Tx) NodeSpec(node string) (proto.NodeSpec, error) {
	var spec proto.NodeSpec
	ok, err := t.get(bucketNodeSpecs, []byte(node), &spec)
	if err == nil && !ok {
		err = notFound("NodeSpec of node", node)
	}
	return spec, err
}

func equalJSON(a, b any) (bool, error) {
	ja, err := json.Marshal(a)
	if err != nil {
		return false, err
	}
	jb, err := json.Marshal(b)
	return bytes.Equal(ja, jb), err
}
