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
	return n, stateEvent(tx, old.State, n)
}

// stateEvent appends to n's event log its move from state from to its state, with the
// failure that moved it to failed.
func stateEvent(tx *store.Tx, from string, n store.Node) error {
	e := store.Event{Node: n.ID, Tenant: n.Tenant, Kind: store.EventNodeState, From: from, To: n.State, Workflow: n.Workflow}
	if n.State == store.NodeFailed && n.Failure != nil {
		e.Step, e.Use, e.Error = n.Failure.Step, n.Failure.Use, n.Failure.Error
	}
	_, err := tx.AppendEvent(e)
	return err
}
