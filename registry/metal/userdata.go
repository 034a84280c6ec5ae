package metal

import (
	"context"
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// UserData renders a node's first-boot user data from a profile's userData.
type UserData interface {
	// Render mints the node's provisioned join token, as minted by the workflow run
	// (store.JoinToken.Workflow), renders the profile's template, stores the document in
	// the secret store and returns only its reference, all in tx: the transaction of the
	// step's attempt (workflow.Attempt.Update), so that a registry that lost the run
	// neither deletes the token the run's driver minted nor replaces its document.
	Render(tx *store.Tx, node store.Node, run string, p *profile.Profile) (proto.UserDataRendered, error)
}

const stepRender = proto.StepRenderUserData

// renderUserData is userdata.render.
func (s *Service) renderUserData(_ context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	if s.cfg.UserData == nil {
		return nil, proto.Errorf(proto.Unsupported, "userdata.render needs the user-data renderer, which this registry does not have")
	}
	p, err := a.Profile()
	if err != nil {
		return nil, err
	}
	var res proto.UserDataRendered
	err = a.Update(func(tx *store.Tx) (err error) { res, err = s.cfg.UserData.Render(tx, a.Node, a.Run.ID, p); return err })
	if err != nil {
		return nil, err
	}
	return proto.Marshal(res)
}

// renderedUserData returns the result of the run's last userdata.render that succeeded,
// false when none did.
func renderedUserData(run store.Run) (proto.UserDataRendered, bool, error) {
	var res proto.UserDataRendered
	for i := len(run.Steps) - 1; i >= 0; i-- {
		s := run.Steps[i]
		if s.Use != stepRender || s.State != store.StepSucceeded {
			continue
		}
		if err := json.Unmarshal(s.Result, &res); err != nil {
			return res, false, proto.Errorf(proto.Internal, "%s: the stored user data result does not decode: %w", s.Path(), err)
		}
		return res, true, nil
	}
	return res, false, nil
}
