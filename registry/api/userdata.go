package api

import (
	"context"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// UserDataPreviewer renders the user data a node would boot with, its join token
// redacted, minting and storing nothing: the registry's userdata.Renderer.
type UserDataPreviewer interface {
	Preview(ud profile.UserData, nodeID string) ([]byte, error)
}

// PreviewUserDataRequest is the body of userdata.preview: a profile version as the
// tenant sees it (the latest when profileVersion is left out) and a node.
type PreviewUserDataRequest struct {
	ProfileKey
	NodeID string `json:"nodeId"`
}

// UserDataPreview is the answer of userdata.preview.
type UserDataPreview struct {
	TenantID string `json:"tenantId"`
	ID       string `json:"id"`
	Version  int    `json:"version"`
	NodeID   string `json:"nodeId"`
	Kind     string `json:"kind"`
	Template string `json:"template"`
	// Document is the rendered document with the join token redacted.
	Document string `json:"document"`
}

// RegisterUserData adds userdata.preview, which needs compute:profiles:read.
func (s *Server) RegisterUserData(u UserDataPreviewer) {
	ps := newProfiles(s)
	Handle(s, "userdata.preview", ActionProfilesRead, func(_ context.Context, c *Caller, req PreviewUserDataRequest) (out UserDataPreview, err error) {
		if req.NodeID == "" {
			return out, proto.Errorf(proto.InvalidInput, "nodeId is required: the node whose user data to preview").WithPath("nodeId")
		}
		var rec store.ProfileRecord
		err = c.view(func(tx *store.Tx) (err error) { rec, err = ps.resolve(tx, c, req.ProfileKey); return err })
		if err != nil {
			return out, err
		}
		p, err := profile.DefineStored(rec.ID, rec.Version, rec.Document)
		if err != nil {
			return out, err
		}
		ud, ok := p.UserData()
		if !ok {
			return out, proto.Errorf(proto.InvalidInput, "profile %s has no userData: nothing to preview", profileLabel(rec.ID, rec.Version)).WithPath("id")
		}
		doc, err := u.Preview(ud, req.NodeID)
		if err != nil {
			return out, err
		}
		return UserDataPreview{TenantID: rec.Tenant, ID: rec.ID, Version: rec.Version, NodeID: req.NodeID,
			Kind: ud.Kind, Template: ud.Template, Document: string(doc)}, nil
	})
}
