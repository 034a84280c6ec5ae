package api

import (
	"context"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/store"
)

// RegisterImageRequest is the body of images.register: the image by digest, signed when
// signerId and signature are given (together).
type RegisterImageRequest struct {
	TenantID    string            `json:"tenantId,omitempty"`
	Ref         string            `json:"ref"`
	Kind        proto.ImageKind   `json:"kind,omitempty"`
	Format      proto.ImageFormat `json:"format"`
	Compression proto.Compression `json:"compression,omitempty"`
	SHA256      string            `json:"sha256"`
	// SizeBytes is the artifact's size; absent when unknown.
	SizeBytes *int64 `json:"sizeBytes,omitempty"`
	Source    string `json:"source"`
	SignerID  string `json:"signerId,omitempty"`
	Signature string `json:"signature,omitempty"`
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
	Images     []Image `json:"images"`
	NextCursor string  `json:"nextCursor,omitempty"`
}

// registerImages adds images.register, images.get, images.list and images.promote,
// verifying signatures with the offline allowlists.
func (s *Server) registerImages() {
	verifier := image.Allowlist{}
	Handle(s, "images.register", ActionImagesPublish, func(_ context.Context, c *Caller, req RegisterImageRequest) (out Image, err error) {
		err = inTenant(s.store.Update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			img, err := image.Register(tx, verifier, tenant, image.RegisterRequest{Ref: req.Ref, Kind: req.Kind, Format: req.Format,
				Compression: req.Compression, SHA256: req.SHA256, SizeBytes: req.SizeBytes, Source: req.Source, SignerID: req.SignerID, Signature: req.Signature})
			out = imageOf(img)
			return err
		})
		return out, err
	})
	Handle(s, "images.get", ActionImagesRead, func(_ context.Context, c *Caller, req GetImageRequest) (out Image, err error) {
		if (req.ID == "") == (req.Ref == "") {
			return out, proto.Errorf(proto.InvalidInput, "name the image by its id or by its ref: one of the two").WithPath("id")
		}
		err = inTenant(c.view, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			var img store.Image
			var err error
			if req.Ref != "" {
				img, err = image.ResolveImage(tx, tenant, req.Ref)
				err = notFoundAt(err, "ref")
			} else {
				img, err = image.Get(tx, tenant, req.ID)
				err = c.elsewhere(notFoundAt(err, "id"), "id", tenant, imageOwner(tx, req.ID))
			}
			out = imageOf(img)
			return err
		})
		return out, err
	})
	Handle(s, "images.list", ActionImagesRead, func(_ context.Context, c *Caller, req ListImagesRequest) (out ImageList, err error) {
		out.Images, out.NextCursor, err = tenantPage(c, req.TenantID, req.ListRequest, func(tx *store.Tx, tenant string, page store.Page) ([]Image, string, error) {
			images, next, err := image.List(tx, tenant, req.Kind, page)
			return viewsOf(images, imageOf), next, err
		})
		return out, err
	})
	Handle(s, "images.promote", ActionImagesPublish, func(_ context.Context, c *Caller, req ImageRequest) (out Image, err error) {
		err = inTenant(s.store.Update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			img, err := image.Promote(tx, tenant, req.ID)
			out = imageOf(img)
			return c.elsewhere(notFoundAt(err, "id"), "id", tenant, imageOwner(tx, req.ID))
		})
		return out, err
	})
}
