package metal

import (
	"context"
	"encoding/json"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// Image is a catalog image as deploy.deploy needs it.
type Image struct {
	ID     string
	Tenant string
	Ref    string
	// Kind is os or ramdisk.
	Kind string
	// Format is raw, qcow2 or iso; Compression none, zstd or gzip.
	Format      string
	Compression string
	// SHA256 is the digest of the artifact as stored, 64 lower-case hex digits.
	SHA256    string
	SizeBytes int64
	// Source is an https:// or oci:// URL.
	Source string
}

// Images is the image catalog, as deploy.deploy uses it.
type Images interface {
	// Resolve finds ref as tenant names it: its own image, else the platform's public
	// one; TENANT/name@version for that tenant's public image; NOT_FOUND otherwise.
	Resolve(ctx context.Context, tenant, ref string) (Image, error)
	// VerifyForUse re-verifies, right before tenant deploys it, the image's stored
	// signature against tenant's and the platform's allowlists, whoever owns it. An
	// unsigned image (unless allowUnsigned lets tenant's own private OS image through),
	// a revoked signer or a tampered row is INVALID_STATE with the reason unsigned or
	// signature; another tenant's image whose signer neither allowlist has, with the
	// reason untrusted-signer.
	VerifyForUse(ctx context.Context, tenant string, img Image, allowUnsigned bool) error
	// CacheURL is where the site's cache serves the image, "" when it does not hold it:
	// with a capability that expires at until (proto.CacheCapURL), or none when until is
	// zero (a URL that only says the site holds the image).
	CacheURL(ctx context.Context, site string, img Image, until time.Time) (string, error)
}

// maxDeployCapLifetime bounds the life of a deploy's cache capability, whatever the
// step's timeout: a URL copied out of a deploy opens the image no longer than this.
const maxDeployCapLifetime = 12 * time.Hour

// cacheCapExpiry is when the cache capability of a's deploy.image expires: when a's step
// times out (its timeout counted from the attempt's start, as the engine counts it), and
// no later than maxDeployCapLifetime after now.
func cacheCapExpiry(a *workflow.Attempt, now time.Time) time.Time {
	end := a.StartedAt.Add(time.Duration(a.Step.TimeoutSeconds) * time.Second)
	if bound := now.Add(maxDeployCapLifetime); end.After(bound) {
		return bound
	}
	return end
}

// deployImage is deploy.deploy's registry part: it resolves the image in the node
// owner's tenant (the profile's format and compression override the catalog's for the
// profile's own image), refuses an iso, verifies the image for use, and only then
// relays deploy.image to the ramdisk with the user-data reference userdata.render
// returned. The ramdisk gets the image's source only when the node's site (and pool)
// allow the ramdisk to fetch from it (deploySource); one that may not, and that the
// site's cache does not hold, fails the step with FORBIDDEN before anything is relayed.
// Before deploy.image, where the pool's measured-boot policy is not off, the
// machine attests its boot (attest): a boot the policy refuses never gets the image, nor
// the user data and join token that come with it. A digest that differs from the
// catalog's fails with DRIVER_ERROR.
func (s *Service) deployImage(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	if s.cfg.Images == nil {
		return nil, proto.Errorf(proto.Unsupported, "deploy.deploy needs the image catalog, which this registry does not have")
	}
	var with struct{ Image string }
	if err := json.Unmarshal(a.Step.With, &with); err != nil {
		return nil, proto.Errorf(proto.Internal, "deploy.deploy: with does not decode: %w", err)
	}
	p, err := a.Profile()
	if err != nil {
		return nil, err
	}
	img, err := s.cfg.Images.Resolve(ctx, a.Node.Tenant, with.Image)
	if err != nil {
		return nil, err
	}
	if own, ok := p.Image(); ok && own.Ref == with.Image {
		if own.Format != "" {
			img.Format = own.Format
		}
		if own.Compression != "" {
			img.Compression = own.Compression
		}
	}
	if proto.ImageFormat(img.Format) == proto.FormatISO {
		return nil, proto.Errorf(proto.InvalidInput, "image %s is an iso, which deploy.deploy cannot write to disk: boot it with media.insert", img.Ref).WithPath("with.image")
	}
	if err := s.cfg.Images.VerifyForUse(ctx, a.Node.Tenant, img, s.cfg.AllowUnsignedImages); err != nil {
		return nil, err
	}
	cacheURL, err := s.cfg.Images.CacheURL(ctx, a.Node.Site, img, cacheCapExpiry(a, s.cfg.Clock.Now()))
	if err != nil {
		return nil, err
	}
	source, bound, err := s.deploySource(a.Node, img, cacheURL)
	if err != nil {
		return nil, err
	}
	in := proto.DeployImage{Ref: img.Ref, Source: source, ImageSources: bound, CacheURL: cacheURL, SHA256: img.SHA256,
		Format: img.Format, Compression: img.Compression, SizeBytes: img.SizeBytes}
	ud, ok, err := renderedUserData(a.Run)
	if err != nil {
		return nil, err
	}
	if _, wants := p.UserData(); wants && !ok {
		return nil, proto.Errorf(proto.InvalidConfig, "profile %s has userData, and no userdata.render succeeded before deploy.deploy: the machine would boot without it", p.ID())
	}
	in.UserDataRef, in.UserDataKind = ud.UserDataRef, ud.Kind
	input, err := proto.Marshal(in)
	if err != nil {
		return nil, err
	}
	if _, err := s.attest(ctx, a); err != nil {
		return nil, err
	}
	// The cache URL's capability, and whether the cache or only the source is offered,
	// are of the moment input is made: an attempt resumed after a restart relays the
	// deploy.image it sent before (workflow.Attempt.Relay), which the ramdisk may be
	// writing already.
	raw, err := a.Relay(ctx, profile.Ramdisk, "image", proto.CommandDeployImage, input)
	if err != nil {
		return nil, err
	}
	var out proto.DeployImageResult
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, proto.Errorf(proto.DriverError, "the ramdisk's answer to deploy.image does not decode: %v", err)
	}
	if out.SHA256 != img.SHA256 {
		return nil, proto.Errorf(proto.DriverError, "the ramdisk wrote an artifact whose digest is %q, not the catalog's %s: the disk is not the image", out.SHA256, img.SHA256).WithReason(proto.ReasonDigestMismatch)
	}
	return raw, nil
}

// deploySource is the source node's ramdisk may fetch img from when the site's cache
// does not deliver it, and where that fetch may go: img.Source when the site's image
// sources, and the pool's when it narrows them, allow it (image.RefuseFetch, the rule of
// the site's cache plan), with that bound (image.NodeBound), which the ramdisk applies to
// every request and address of the fetch; else "" and no bound. A ramdisk runs on the
// provisioning network, on the platform's side of it, and a tenant writes any URL into
// the catalog: without this bound a tenant's image could make the machine fetch from a
// host inside that network (a metadata service, an admin interface) and land the answer
// on the tenant's own disk. When the source is refused and cacheURL is empty, nothing is
// left to deploy from: the refusal, FORBIDDEN with reason source-not-allowed at
// with.image, fails the step.
func (s *Service) deploySource(node store.Node, img Image, cacheURL string) (source string, bound *proto.SourceBound, err error) {
	err = s.cfg.Store.View(func(tx *store.Tx) error {
		source, bound, err = boundSource(tx, node, img.Ref, img.Source, cacheURL)
		return err
	})
	return source, bound, err
}

// boundSource is deploySource's rule, read in tx: source and the bound of node's site
// and pool when they allow it; "" and no bound when they do not and cacheURL is set;
// else the refusal.
func boundSource(tx *store.Tx, node store.Node, ref, source, cacheURL string) (string, *proto.SourceBound, error) {
	st, pool, err := image.NodeBounds(tx, node)
	if err != nil {
		return "", nil, err
	}
	bound := image.NodeBound(st, pool)
	refusal := image.RefuseFetch(st, pool, image.Fetch{Source: source, Path: "with.image",
		What: proto.Sprintf("image %s is not in site %s's cache, and its source", ref, node.Site),
		Else: "; or register the image from a source the site allows and pre-warm it there (policy.prewarmImages)"})
	switch {
	case refusal == nil:
		return source, &bound, nil
	case cacheURL != "":
		return "", nil, nil
	}
	return "", nil, refusal
}

// DeliverDeployImage is deploy.image cmd as it is delivered to node's ramdisk (its
// agent endpoint's Expand, at each delivery): its source and imageSources held to the
// image sources of node's site and pool as they stand now (boundSource), not as they
// stood when the step stored the command. A command waits stored until its ramdisk is
// there to take it (it reconnects, or boots again), and the platform may have taken a
// host off the site's list meanwhile, a mirror found compromised: the command does not
// carry it back. A source no longer allowed is left out, the cache alone offered; with no
// cache URL the command is refused, FORBIDDEN source-not-allowed, and never sent. A
// ramdisk already running the command keeps running it as it got it: a resend of the
// same id joins that run. Other commands pass unchanged.
func DeliverDeployImage(tx *store.Tx, nodeID string, cmd proto.Command) (proto.Command, error) {
	if cmd.Kind != proto.CommandDeployImage {
		return cmd, nil
	}
	var in proto.DeployImage
	if err := json.Unmarshal(cmd.Payload, &in); err != nil {
		return cmd, proto.Errorf(proto.Internal, "deploy.image payload: %v", err)
	}
	if in.Source == "" {
		return cmd, nil
	}
	node, err := tx.Node(nodeID)
	if err != nil {
		return cmd, err
	}
	if in.Source, in.ImageSources, err = boundSource(tx, node, in.Ref, in.Source, in.CacheURL); err != nil {
		return cmd, err
	}
	cmd.Payload, err = proto.Marshal(in)
	return cmd, err
}
