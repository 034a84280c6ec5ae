package api

import (
	"context"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// GetWorkflowRequest is the body of workflows.get. With afterRev, the call waits (up to
// 25 seconds) until the run's rev is past it or the run has ended: how a client follows a
// run's progress.
type GetWorkflowRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	ID       string `json:"id"`
	AfterRev int    `json:"afterRev,omitempty"`
}

// WorkflowView is a workflow run as the API shows it: the run without its profile
// document.
type WorkflowView struct {
	ID         string       `json:"id"`
	Kind       string       `json:"kind"`
	NodeID     string       `json:"nodeId"`
	TenantID   string       `json:"tenantId"`
	Profile    ProfileRef   `json:"profile"`
	State      string       `json:"state"`
	Steps      []RunStep    `json:"steps"`
	Failure    *StepFailure `json:"failure,omitempty"`
	Rev        int          `json:"rev"`
	CreatedAt  time.Time    `json:"createdAt"`
	UpdatedAt  time.Time    `json:"updatedAt"`
	FinishedAt time.Time    `json:"finishedAt,omitzero"`
}

// maxWatch bounds how long workflows.get waits for a change.
const maxWatch = 25 * time.Second

// RegisterWorkflows adds workflows.get.
func (s *Server) RegisterWorkflows(eng *workflow.Engine) {
	Handle(s, "workflows.get", ActionNodesRead, func(ctx context.Context, c *Caller, req GetWorkflowRequest) (out WorkflowView, err error) {
		var tenant string
		if err := c.view(func(tx *store.Tx) (err error) { tenant, err = c.TenantFor(tx, req.TenantID); return err }); err != nil {
			return out, err
		}
		run, err := eng.Watch(ctx, req.ID, 0)
		if proto.CodeOf(err) == proto.NotFound || err == nil && run.Tenant != tenant {
			return out, c.elsewhere(proto.Errorf(proto.NotFound, "workflow %q not found: %s", req.ID, store.WorkflowsListed).WithPath("id"), "id", tenant, func() string { return run.Tenant })
		}
		if err == nil && req.AfterRev > 0 {
			if err := c.awaitChange(); err != nil {
				return out, err
			}
			ctx, cancel := context.WithTimeout(ctx, maxWatch)
			defer cancel()
			run, err = eng.Watch(ctx, req.ID, req.AfterRev)
		}
		if err != nil {
			return out, err
		}
		return WorkflowView{ID: run.ID, Kind: run.Kind, NodeID: run.Node, TenantID: run.Tenant, Profile: ProfileRef(run.Profile), State: run.State,
			Steps: viewsOf(run.Steps, stepOf), Failure: failureOf(run.Failure), Rev: run.Rev, CreatedAt: run.CreatedAt, UpdatedAt: run.UpdatedAt, FinishedAt: run.FinishedAt}, nil
	})
}
