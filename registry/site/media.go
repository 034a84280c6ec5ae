package site

import (
	"encoding/json"
	"strings"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// ExpandMediaInsert completes a media.insert command for the site agent: the step's
// `with` ({url}, {fromStep} or {image}) becomes a proto.MediaInsert. A url is held to
// profile.CheckHTTPSURL once more, INVALID_INPUT at with.url and never delivered: the
// profile holding it may have been stored before the check's rules. fromStep takes the
// `url` of the named earlier step's result, in the workflow run the command id names. A
// catalog image is resolved in the machine owner's tenant, must be a verified iso with an
// https:// source, and carries its digest and the machine's MACs, so that a BMC without
// virtual media boots it by sanboot from the site cache. Other commands pass unchanged.
//
// The URL the BMC is told to mount must be allowed by the image sources of the machine's
// site, and of its pool when they narrow the site's (image.RefuseFetch): a BMC fetches
// from the site's BMC network, on the platform's side, and the machine boots what it got,
// so without the bound a tenant's URL (any of the three: a profile's url, its catalog
// row's source, or the result of an earlier step, which a tenant's own machine can
// answer) could make the BMC fetch from a host inside that network. A refusal is
// FORBIDDEN (source-not-allowed) and the command is never delivered.
func ExpandMediaInsert(tx *store.Tx, cmd proto.Command, v image.Verifier) (proto.Command, error) {
	if cmd.Kind != proto.CommandMediaInsert {
		return cmd, nil
	}
	var sc proto.SiteCommand
	if err := json.Unmarshal(cmd.Payload, &sc); err != nil {
		return cmd, proto.Errorf(proto.Internal, "media.insert payload: %v", err)
	}
	var with struct {
		URL      string `json:"url"`
		Image    string `json:"image"`
		FromStep string `json:"fromStep"`
	}
	if err := (jsondoc.Decoder{Name: "media.insert's with", At: "with"}).Decode(sc.Input, &with); err != nil {
		return cmd, err
	}
	node, err := tx.Node(sc.Node)
	if err != nil {
		return cmd, err
	}
	var in proto.MediaInsert
	var fetch image.Fetch
	switch {
	case with.FromStep != "":
		url, err := stepURL(tx, cmd.ID, with.FromStep)
		if err != nil {
			return cmd, err
		}
		in = proto.MediaInsert{URL: url}
		fetch = image.Fetch{Path: "with.fromStep", What: proto.Sprintf("the BMC at site %s may not mount the url %s returned: its", node.Site, with.FromStep),
			Else: "; or have that step return a url on a host the site allows"}
	case with.Image != "":
		img, err := image.ResolveImage(tx, node.Tenant, with.Image)
		if err != nil {
			return cmd, proto.AsError(err).WithPath("with.image")
		}
		if err := image.VerifyImageForUse(tx, node.Tenant, img, image.UseOptions{Verifier: v}); err != nil {
			return cmd, err
		}
		if img.Format != proto.FormatISO || !strings.HasPrefix(img.Source, "https://") {
			return cmd, proto.Errorf(proto.InvalidInput, "image %s is a %s from %s: media.insert mounts an iso with an https:// source", img.Ref, img.Format, img.Source).WithPath("with.image")
		}
		in = proto.MediaInsert{URL: img.Source, Digest: img.SHA256, MACs: node.MACs, ProductUUID: node.ProductUUID}
		fetch = image.Fetch{Path: "with.image", What: proto.Sprintf("the BMC at site %s may not mount image %s: its source", node.Site, img.Ref),
			Else: "; or register the iso from a source the site allows"}
	case with.URL != "":
		// The profile's check, again: a version stored before a rule (user information,
		// a space, its length) may hold a url the check now refuses, and the command
		// would hand it to the BMC.
		if err := profile.CheckHTTPSURL(with.URL); err != nil {
			return cmd, proto.Errorf(proto.InvalidInput, "media.insert's url is not mounted: %v; the profile was stored before the rule, so `profiles validate` names it: make a version with a url it takes", err).WithPath("with.url")
		}
		in = proto.MediaInsert{URL: with.URL}
		fetch = image.Fetch{Path: "with.url", What: proto.Sprintf("the BMC at site %s may not mount media.insert's url: its", node.Site),
			Else: "; or mount an iso from a host the site allows"}
	default:
		return cmd, proto.Errorf(proto.InvalidInput, "media.insert takes an https:// url or a catalog image").WithPath("with")
	}
	site, pool, err := image.NodeBounds(tx, node)
	if err != nil {
		return cmd, err
	}
	fetch.Source = in.URL
	if err := image.RefuseFetch(site, pool, fetch); err != nil {
		return cmd, err
	}
	if sc.Input, err = proto.Marshal(in); err != nil {
		return cmd, err
	}
	cmd.Payload, err = proto.Marshal(sc)
	return cmd, err
}

// stepURL is the https:// `url` of the result of step path (steps[N], acceptance[N],
// cleanup[N]) of the run whose command id is id (RUN:PHASE.N:ATTEMPT, see
// registry/workflow), held to the rule of a profile's url (profile.CheckHTTPSURL): a
// tenant's machine may answer that step, and user information in the url (which a BMC's
// parser may take for its host), its length or a control character in it would otherwise
// reach the BMC, the site agent's log and the step's result.
func stepURL(tx *store.Tx, id, path string) (string, error) {
	bad := func(format string, args ...any) error {
		return proto.Errorf(proto.InvalidInput, format, args...).WithPath("with.fromStep")
	}
	runID, _, _ := strings.Cut(id, ":")
	run, err := tx.Run(runID)
	if err != nil {
		return "", bad("media.insert fromStep: command %s belongs to no workflow run", id)
	}
	for _, st := range run.Steps {
		if st.Path() != path {
			continue
		}
		var res struct {
			URL string `json:"url"`
		}
		if json.Unmarshal(st.Result, &res) != nil || !strings.HasPrefix(res.URL, "https://") {
			return "", bad("step %s (%s) returned no https:// url", path, st.Use)
		}
		if err := profile.CheckHTTPSURL(res.URL); err != nil {
			return "", bad("step %s (%s) returned a url media.insert does not mount: %v", path, st.Use, err)
		}
		return res.URL, nil
	}
	return "", bad("run %s has no step %s", runID, path)
}
