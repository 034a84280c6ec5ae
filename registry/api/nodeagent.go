package api

import (
	"encoding/json"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
)

// NodeView is what metal.get answers: the node and what its agent reports.
type NodeView struct {
	Node
	// Agent is nil until the node has a NodeSpec or its agent reported.
	Agent *NodeAgent `json:"agent,omitempty"`
	// Wipe is the last disk.wipe of the node's last workflow, nil when it had none.
	Wipe *NodeWipe `json:"wipe,omitempty"`
	// Requests are the requests the node takes now, as the lifecycle table says
	// (metal.Offers): every other is INVALID_STATE, but a rescue or unrescue on a pool
	// with agent: none, left out as it only fails the node UNSUPPORTED. A credential may
	// still be refused one of them (FORBIDDEN).
	Requests []string `json:"requests"`
	// Warnings are what the node's inventory warns of (inventoryWarnings): a disk
	// hiding capacity from a wipe.
	Warnings []string `json:"warnings,omitempty"`
}

// NodeWipe is a disk.wipe step of a node's workflow as the registry read its signed
// result (registry/attest): `workflows attestation` prints the signed result itself.
type NodeWipe struct {
	WorkflowID string    `json:"workflowId"`
	Step       string    `json:"step"`
	Mode       string    `json:"mode,omitempty"`
	Attested   bool      `json:"attested"`
	Reason     string    `json:"reason,omitempty"`
	FinishedAt time.Time `json:"finishedAt"`
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
	v := NodeView{Node: nodeOf(n)}
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
	v.Warnings = inventoryWarnings(inv)
	if seen {
		v.Agent = &a
	}
	offers, err := metal.Offers(tx, n)
	if err != nil {
		return v, err
	}
	v.Requests = make([]string, len(offers))
	for i, r := range offers {
		v.Requests[i] = string(r)
	}
	v.Wipe, err = lastWipe(tx, n)
	return v, err
}

// lastWipe is the last disk.wipe step of n's last workflow that finished with a result.
func lastWipe(tx *store.Tx, n store.Node) (*NodeWipe, error) {
	if n.Workflow == "" {
		return nil, nil
	}
	run, err := tx.Run(n.Workflow)
	if proto.CodeOf(err) == proto.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out *NodeWipe
	for _, s := range run.Steps {
		var w attest.Wipe
		if s.Use != proto.CommandDiskWipe || len(s.Result) == 0 || json.Unmarshal(s.Result, &w) != nil {
			continue
		}
		out = &NodeWipe{WorkflowID: run.ID, Step: s.Path(), Mode: w.Mode, Attested: w.Attested, Reason: w.Reason, FinishedAt: s.FinishedAt}
	}
	return out, nil
}
