package userdata

import (
	"fmt"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/join"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
)

// shipped are the templates that ship, by name. No template ships for talos.
var shipped = map[string]Template{
	CloudInitTemplate: TemplateFunc(cloudInit),
	IgnitionTemplate:  TemplateFunc(ignition),
}

// Purpose is the purpose user data is kept under in the secret store.
const Purpose = "userdata"

// RedactedToken stands for the join token in a preview.
const RedactedToken = "<join-token>"

// MaxDocument bounds a rendered document. It reaches the ramdisk inside the deploy.image
// command, base64 in its JSON (4/3 of its size), and the command is one agent frame
// (proto.MaxFrame, 4 MiB) with its URLs and image sources: a larger document could never
// be delivered, and the deploy would wait out its step's timeout.
const MaxDocument = 2 << 20

// Renderer renders user data with one configuration.
type Renderer struct {
	cfg       Config
	templates map[string]Template
	box       *secret.Box
}

// New checks cfg (see Config.Check) and makes a renderer that keeps documents in box.
func New(cfg Config, box *secret.Box) (*Renderer, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	r := &Renderer{cfg: cfg, templates: map[string]Template{}, box: box}
	for name, t := range shipped {
		r.templates[name] = t
	}
	for name, t := range cfg.Templates {
		r.templates[name] = t
	}
	return r, nil
}

// Node is the node user data is rendered for.
type Node struct {
	ID string
	// Site is the node's site, recorded on its join token; "" when unknown.
	Site string
	// Workflow is the run id of the workflow rendering it, recorded on its join token
	// as the token's minter (store.JoinToken.Workflow).
	Workflow string
}

// Render mints a single-use provisioned join token for the node, renders ud's
// template with it, seals the document into the secret store (replacing the node's
// earlier one) and returns its reference (userdata.render's result). A re-run (a step
// run again, a registry that stopped mid-render) first deletes the unused provisioned
// tokens the same workflow minted for the node, so that of the tokens a workflow mints
// for a node only the last, the one in the stored document, admits it; tokens of other
// workflows and of operators stay. Everything is written in tx, so a failure leaves
// nothing behind, the earlier token included.
func (r *Renderer) Render(tx *store.Tx, ud profile.UserData, node Node) (proto.UserDataRendered, error) {
	t, err := r.template(ud, node.ID)
	if err != nil {
		return proto.UserDataRendered{}, err
	}
	ttl := time.Duration(r.cfg.TokenTTLSeconds) * time.Second
	f := store.TokenFor{Kind: store.TokenProvisioned, NodeID: node.ID, Site: node.Site, Workflow: node.Workflow}
	if node.Workflow != "" {
		if _, err := tx.DeleteUnusedJoinTokensFor(f); err != nil {
			return proto.UserDataRendered{}, err
		}
	}
	tok, bearer, err := join.MintToken(tx, f, ttl)
	if err != nil {
		return proto.UserDataRendered{}, err
	}
	doc, err := r.render(t, ud, node.ID, bearer)
	if err != nil {
		return proto.UserDataRendered{}, err
	}
	payload, err := proto.Marshal(Document{Kind: ud.Kind, Data: doc})
	if err != nil {
		return proto.UserDataRendered{}, err
	}
	ref, err := r.box.Put(tx, Purpose, node.ID, payload)
	return proto.UserDataRendered{UserDataRef: ref, Kind: ud.Kind, JoinTokenID: tok.ID}, err
}

// Preview renders the document node would boot with, its join token replaced by
// RedactedToken. It mints nothing and stores nothing.
func (r *Renderer) Preview(ud profile.UserData, nodeID string) ([]byte, error) {
	t, err := r.template(ud, nodeID)
	if err != nil {
		return nil, err
	}
	return r.render(t, ud, nodeID, RedactedToken)
}

// template checks what Render and Preview are given and finds the template: a missing
// template, or a configuration without the URLs and the digest, is INVALID_CONFIG.
func (r *Renderer) template(ud profile.UserData, nodeID string) (Template, error) {
	if err := proto.CheckNodeID(nodeID); err != nil {
		return nil, proto.AsError(err).WithPath("nodeId")
	}
	t, ok := r.templates[ud.Template]
	if !ok {
		hint := "register it in userData.templates"
		if ud.Kind == "talos" {
			hint = "no template ships for talos: register your own in userData.templates"
		}
		return nil, proto.Errorf(proto.InvalidConfig, "user-data template %q is not registered: %s", ud.Template, hint).WithPath("userData.template")
	}
	for _, f := range []struct{ name, value string }{
		{"controlPlaneUrl", r.cfg.ControlPlaneURL}, {"bcdUrl", r.cfg.BcdURL}, {"bcdSha256", r.cfg.BcdSHA256},
	} {
		if f.value == "" {
			return nil, fieldError(f.name, fmt.Errorf("user data cannot be rendered without %s: configure it (serve --userdata-config FILE)", f.name))
		}
	}
	return t, nil
}

// render renders t, ud's template, for the node with token (fill), and refuses a
// document of kind ignition that Ignition would refuse or read otherwise than the ramdisk
// (checkIgnition), at the template. A preview's document is checked as rendered with
// standInToken: the redacted token is not one Ignition takes where a token goes (a data
// URL).
func (r *Renderer) render(t Template, ud profile.UserData, nodeID, token string) ([]byte, error) {
	doc, err := r.fill(t, ud.Template, nodeID, token)
	if err != nil || ud.Kind != "ignition" {
		return doc, err
	}
	checked := doc
	if token == RedactedToken {
		if checked, err = r.fill(t, ud.Template, nodeID, standInToken); err != nil {
			return nil, err
		}
	}
	if err := checkIgnition(checked); err != nil {
		return nil, proto.Errorf(proto.InvalidConfig, "user-data template %s, of kind ignition: %v", ud.Template, err).WithPath(configPath + ".templates." + ud.Template)
	}
	return doc, nil
}

// standInToken has the form of a minted join token (store.CreateJoinToken: bcj_, the
// token's id, a dot and its secret in base64url) and admits nothing.
const standInToken = "bcj_0000000000000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

// fill fills the variables, checks every value and renders t, named name, refusing a
// document larger than MaxDocument.
func (r *Renderer) fill(t Template, name, nodeID, token string) ([]byte, error) {
	v := Vars{
		NodeID:          nodeID,
		Hostname:        hostnameOf(nodeID),
		JoinToken:       token,
		ControlPlaneURL: r.cfg.ControlPlaneURL,
		BcdURL:          r.cfg.BcdURL,
		BcdSHA256:       r.cfg.BcdSHA256,
	}
	if r.cfg.Pins != nil {
		v.Pins = *r.cfg.Pins
	}
	if err := v.check(); err != nil {
		return nil, err
	}
	doc, err := t.Render(v)
	if err != nil {
		e := proto.AsError(err)
		if e.Code == proto.Internal {
			e = proto.Errorf(proto.InvalidConfig, "user-data template %s: %v", name, err)
		}
		if e.Details.Path == "" {
			e = e.WithPath(configPath + ".templates." + name)
		}
		return nil, e
	}
	if len(doc) > MaxDocument {
		return nil, proto.Errorf(proto.InvalidConfig, "user-data template %s renders %d bytes for node %s, more than the %d a deploy.image can carry to the ramdisk", name, len(doc), nodeID, MaxDocument).WithPath(configPath + ".templates." + name)
	}
	return doc, nil
}
