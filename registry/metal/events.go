package metal

import "github.com/better-compute/better-compute/registry/store"

// updateNode changes a node in tx, appending the move to its event log when its state
// changed: every write of a node's state in metal goes through it.
func updateNode(tx *store.Tx, id string, change func(*store.Node) error) (store.Node, error) {
	old, err := tx.Node(id)
	if err != nil {
		return old, err
	}
	n, err := tx.UpdateNode(id, change)
	if err != nil || n.State == old.State {
		return n, err
	}
	var f *store.StepFailure
	if n.State == store.NodeFailed {
		f = n.Failure
	}
	return n, stateEvent(tx, old.State, n, f)
}

// stateEvent appends to n's event log its move from state from to its state, with f,
// the failure that moved it to failed (nil for none): the node's own, but the rescue's
// of a rescue from failed that fails, the node keeping the failure it had.
func stateEvent(tx *store.Tx, from string, n store.Node, f *store.StepFailure) error {
	e := store.Event{Node: n.ID, Tenant: n.Tenant, Kind: store.EventNodeState, From: from, To: n.State, Workflow: n.Workflow}
	if f != nil {
		e.Step, e.Use, e.Error = f.Step, f.Use, f.Error
	}
	_, err := tx.AppendEvent(e)
	return err
}
