package api

import (
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// NodeView is what metal.get answers: the node and what its agent reports.
type NodeView struct {
	store.Node
	// Agent is nil until the node has a NodeSpec or its agent reported.
	Agent *NodeAgent `json:"agent,omitempty"`
}

// NodeAgent is a node's agent as the registry knows it: the NodeSpec generation it
// should apply, the one it applied, its last failure to apply, and its last host
// convergence (the `host` inventory section).
type NodeAgent struct {
	DesiredGeneration  int64           `json:"desiredGeneration"`
	ObservedGeneration int64           `json:"observedGeneration"`
	ApplyError         *proto.Error    `json:"applyError,omitempty"`
	Host               json.RawMessage `json:"host,omitempty"`
}

// nodeView adds the agent's report to n.
func nodeView(tx *store.Tx, n store.Node) (NodeView, error) {
	v := NodeView{Node: n}
	var a NodeAgent
	seen := false
	spec, err := tx.NodeSpec(n.ID)
	switch {
	case err == nil:
		a.DesiredGeneration, seen = spec.Generation, true
	case proto.CodeOf(err) != proto.NotFound:
		return v, err
	}
	st, err := tx.AgentStatus(n.ID)
	switch {
	case err == nil:
		a.ObservedGeneration, a.ApplyError, seen = st.ObservedGeneration, st.ApplyError, true
	case proto.CodeOf(err) != proto.NotFound:
		return v, err
	}
	inv, err := tx.Inventory(n.ID)
	if err != nil {
		return v, err
	}
	for _, s := range inv {
		if s.Section == proto.SectionHost {
			a.Host, seen = s.Data, true
		}
	}
	if seen {
		v.Agent = &a
	}
	return v, nil
}
