package api

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/registry/workflow"
)

// filteredPages serves every method and the metal ones over a store holding tenant acme
// (storetest.Fill) and the root tenant, made further by fill, and returns a client of
// acme allowed to read its nodes.
func filteredPages(t *testing.T, fill func(tx *store.Tx) error) *Client {
	t.Helper()
	st, s := serve(t)
	storetest.Fill(t, st)
	var secret string
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if _, err = tx.CreateTenant(store.RootTenant); err != nil {
			return err
		}
		if err = fill(tx); err != nil {
			return err
		}
		_, secret, err = tx.CreateCredential(storetest.Tenant, []string{ActionNodesRead}, tx.Now().Add(time.Hour))
		return err
	})
	s.RegisterMetal(metal.New(metal.Config{Store: st, Engine: workflow.New(workflow.Config{Store: st})}))
	return NewHandlerClient(s, secret)
}

// pageAll calls method page after page, one item a page, following the next cursor, and
// returns the items' keys in order; a page offered by a cursor that holds nothing fails
// t: the cursor before it was offered with nothing the filter keeps after it.
func pageAll[Req, Out any](t *testing.T, c *Client, method string, req Req, cursor func(*Req, string), items func(Out) ([]string, string)) []string {
	t.Helper()
	var got []string
	for pages := 1; pages <= 5; pages++ {
		var out Out
		if err := c.Call(context.Background(), method, req, &out); err != nil {
			t.Fatal(err)
		}
		keys, next := items(out)
		if len(keys) == 0 {
			t.Errorf("%s: page %d is empty: the page before it offered a next cursor with nothing the filter keeps after it", method, pages)
		}
		got = append(got, keys...)
		if next == "" {
			return got
		}
		cursor(&req, next)
	}
	t.Fatalf("%s: no end after 5 pages: %v", method, got)
	return nil
}

// TestNodesListByStateEndsAtTheLastNodeInIt: metal.list with a state reads the tenant's
// nodes in id order and keeps those in the state. Of three nodes, the first two ready and
// the last enrolling, the ready ones paged one at a time are two pages, the second the
// end of the list. Before, the second page offered a next one, empty, because a node
// (not ready) followed it.
func TestNodesListByStateEndsAtTheLastNodeInIt(t *testing.T) {
	var ready []string
	c := filteredPages(t, func(tx *store.Tx) error {
		var ids []string
		for _, mac := range []string{"52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03"} {
			n, err := tx.CreateNode(store.Node{Tenant: storetest.Tenant, Pool: storetest.Pool, MACs: []string{mac}})
			if err != nil {
				return err
			}
			ids = append(ids, n.ID)
		}
		slices.Sort(ids)
		ready = ids[:2]
		for _, id := range ready {
			if _, err := tx.UpdateNode(id, func(n *store.Node) error { n.State = store.NodeReady; return nil }); err != nil {
				return err
			}
		}
		return nil
	})
	req := ListNodesRequest{State: store.NodeReady, ListRequest: ListRequest{Limit: 1}}
	got := pageAll(t, c, "metal.list", req, func(r *ListNodesRequest, next string) { r.Cursor = next }, func(out NodeList) ([]string, string) {
		var ids []string
		for _, n := range out.Nodes {
			ids = append(ids, n.ID)
		}
		return ids, out.NextCursor
	})
	if !slices.Equal(got, ready) {
		t.Errorf("the ready nodes paged: %v, want %v", got, ready)
	}
}

// TestWorkflowEventsEndAtTheWorkflowsLastEvent: metal.events with a workflow reads the
// node's log in order and keeps that workflow's events. Of three events, the first two of
// the workflow and the last of none, the workflow's paged one at a time are two pages, the
// second the end of the list. Before, the second page offered a next one, empty, because
// an event (not the workflow's) followed it.
func TestWorkflowEventsEndAtTheWorkflowsLastEvent(t *testing.T) {
	var node, workflow string
	c := filteredPages(t, func(tx *store.Tx) error {
		n, err := tx.CreateNode(store.Node{Tenant: storetest.Tenant, Pool: storetest.Pool, MACs: []string{"52:54:00:00:00:01"}})
		if err != nil {
			return err
		}
		run, err := tx.CreateRun(store.Run{Kind: "deploy", Node: n.ID, Tenant: n.Tenant, Document: json.RawMessage(`{}`),
			Steps: []store.RunStep{{Phase: "steps", Use: "deploy.deploy"}}})
		if err != nil {
			return err
		}
		node, workflow = n.ID, run.ID
		for _, wf := range []string{run.ID, run.ID, ""} {
			if _, err := tx.AppendEvent(store.Event{Node: n.ID, Tenant: n.Tenant, Kind: store.EventNodeState, Workflow: wf}); err != nil {
				return err
			}
		}
		return nil
	})
	req := EventsRequest{NodeID: node, WorkflowID: workflow, ListRequest: ListRequest{Limit: 1}}
	got := pageAll(t, c, "metal.events", req, func(r *EventsRequest, next string) { r.Cursor = next }, func(out EventList) ([]string, string) {
		var seqs []string
		for _, e := range out.Events {
			seqs = append(seqs, fmt.Sprintf("%s#%d", e.WorkflowID, e.Seq))
		}
		return seqs, out.NextCursor
	})
	if want := []string{workflow + "#1", workflow + "#2"}; !slices.Equal(got, want) {
		t.Errorf("the workflow's events paged: %v, want %v", got, want)
	}
}
