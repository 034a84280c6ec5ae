package api

import (
	"context"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/store"
)

// RegisterImageRequest is the body of images.register.
type RegisterImageRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	image.RegisterRequest
}

// ImageRequest names one image: the body of images.promote.
type ImageRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	ID       string `json:"id"`
}

// GetImageRequest is the body of images.get: one image by id, or by ref as a profile of
// the tenant names it (name@version, or TENANT/name@version), resolved as a deploy
// resolves it.
type GetImageRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	ID       string `json:"id,omitempty"`
	Ref      string `json:"ref,omitempty"`
}

// ListImagesRequest is the body of images.list.
type ListImagesRequest struct {
	TenantID string          `json:"tenantId,omitempty"`
	Kind     proto.ImageKind `json:"kind,omitempty"`
	ListRequest
}

// ImageList is the answer of images.list.
type ImageList struct {
	Images     []store.Image `json:"images"`
	NextCursor string        `json:"nextCursor,omitempty"`
}

// registerImages adds images.register, images.get, images.list and images.promote,
// verifying signatures with the offline allowlists.
func (s *Server) registerImages() {
	verifier := image.Allowlist{}
	Handle(s, "images.register", ActionImagesPublish, func(_ context.Context, c *Caller, req RegisterImageRequest) (img store.Image, err error) {
		err = s.store.Update(func(tx *store.Tx) error {
			tenant, err := c.TenantFor(tx, req.TenantID)
			if err != nil {
				return err
			}
			img, err = image.Register(tx, verifier, tenant, req.RegisterRequest)
			return err
		})
		return img, err
	})
	Handle(s, "images.get", ActionImagesRead, func(_ context.Context, c *Caller, req GetImageRequest) (img store.Image, err error) {
		if (req.ID == "") == (req.Ref == "") {
			return img, proto.Errorf(proto.InvalidInput, "name the image by its id or by its ref: one of the two").WithPath("id")
		}
		err = s.store.View(func(tx *store.Tx) error {
			tenant, err := c.TenantFor(tx, req.TenantID)
			if err != nil {
				return err
			}
			if req.Ref != "" {
				img, err = image.ResolveImage(tx, tenant, req.Ref)
			} else {
				img, err = image.Get(tx, tenant, req.ID)
			}
			return err
		})
		return img, err
	})
	Handle(s, "images.list", ActionImagesRead, func(_ context.Context, c *Caller, req ListImagesRequest) (out ImageList, err error) {
		out.Images, out.NextCursor, err = tenantPage(s.store, c, req.TenantID, req.ListRequest, func(tx *store.Tx, tenant string, page store.Page) ([]store.Image, string, error) {
			return image.List(tx, tenant, req.Kind, page)
		})
		return out, err
	})
	Handle(s, "images.promote", ActionImagesPublish, func(_ context.Context, c *Caller, req ImageRequest) (img store.Image, err error) {
		err = s.store.Update(func(tx *store.Tx) error {
			tenant, err := c.TenantFor(tx, req.TenantID)
			if err != nil {
				return err
			}
			img, err = image.Promote(tx, tenant, req.ID)
			return err
		})
		return img, err
	})
}
