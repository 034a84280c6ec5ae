package userdata

import (
	"encoding/json"
	"fmt"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/store"
)

// Document is a rendered user-data document as the secret store keeps it.
type Document struct {
	// Kind is cloud-init, ignition or talos: where the ramdisk installs the document.
	Kind string `json:"kind"`
	Data []byte `json:"data"`
}

// Fetch returns the document ref names to the agent it is for (the agent endpoint calls
// it as it delivers a deploy.image):
// only the ramdisk of the node the document was rendered for gets it; anyone else is
// FORBIDDEN. An unknown ref, or one a re-render replaced, is NOT_FOUND.
func (r *Renderer) Fetch(tx *store.Tx, ref, callerNodeID, callerRole string) (Document, error) {
	if callerRole != joinwire.RoleRamdisk {
		return Document{}, proto.Errorf(proto.Forbidden, "user data goes only to the ramdisk of its node, not to a %s agent", callerRole)
	}
	sec, plain, err := r.box.Get(tx, ref)
	if err != nil {
		return Document{}, err
	}
	if sec.Purpose != Purpose {
		return Document{}, proto.Errorf(proto.NotFound, "user data %q not found", ref)
	}
	if sec.NodeID != callerNodeID {
		return Document{}, proto.Errorf(proto.Forbidden, "user data %s belongs to another node than %s", ref, callerNodeID)
	}
	var doc Document
	if err := json.Unmarshal(plain, &doc); err != nil {
		return Document{}, fmt.Errorf("user data %s: %w", ref, err)
	}
	return doc, nil
}

// Deliver completes a command as it is delivered to the agent of node in role: a
// deploy.image that names user data gets the document (Fetch: only the ramdisk of the
// node it was rendered for, anyone else is FORBIDDEN); any other command passes as it
// is. The document is never stored with the command.
func (r *Renderer) Deliver(tx *store.Tx, node string, role proto.Role, cmd proto.Command) (proto.Command, error) {
	if cmd.Kind != proto.CommandDeployImage {
		return cmd, nil
	}
	var in proto.DeployImage
	if err := json.Unmarshal(cmd.Payload, &in); err != nil {
		return cmd, proto.Errorf(proto.Internal, "deploy.image payload: %v", err)
	}
	if in.UserDataRef == "" {
		return cmd, nil
	}
	doc, err := r.Fetch(tx, in.UserDataRef, node, string(role))
	if err != nil {
		return cmd, err
	}
	in.UserData = doc.Data
	payload, err := proto.Marshal(in)
	cmd.Payload = payload
	return cmd, err
}
