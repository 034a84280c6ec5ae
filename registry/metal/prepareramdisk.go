package metal

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// RamdiskBoots makes what one ramdisk boot of a machine needs.
type RamdiskBoots interface {
	// Prepare mints in tx the single-use ramdisk join token of node's next boot, as
	// minted by the workflow run (store.JoinToken.Workflow), and returns
	// boot.prepareRamdisk's input: the machine's identity, the token, the registry's URL
	// and pins. tx is the transaction of the step's attempt (workflow.Attempt.Update): a
	// registry that lost the run mints none.
	Prepare(tx *store.Tx, node store.Node, run string) (proto.PrepareRamdisk, error)
	// Joinable is nil when a ramdisk can join with token, or did: it is unexpired and
	// unused, or used. A token that expired unused, or that is gone (revoked, pruned),
	// is INVALID_STATE with the reason token-expired or token-invalid.
	Joinable(ctx context.Context, token string) error
}

// prepareRamdisk is boot.prepareRamdisk: it mints the ramdisk's join token and relays
// the boot entry's ingredients to the site agent.
func (s *Service) prepareRamdisk(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	return s.relayPrepare(ctx, a, "")
}

// relayPrepare relays boot.prepareRamdisk under sub, with the pool's extra initrds
// (verified each time the attempt runs) and its Secure Boot setting. Its input carries a
// join token minted for it, so it is made once per command: an attempt resumed after a
// restart relays the token it minted before (workflow.Attempt.RelayMade), which the site
// may be putting in the boot entry already, and mints none. Once answered, the boot
// entry's token must still be one a ramdisk can join with (RamdiskBoots.Joinable): one
// that expired unused (the attempt ran longer than a token lives) fails the step, whose
// next try mints another, instead of booting a ramdisk that can never join.
func (s *Service) relayPrepare(ctx context.Context, a *workflow.Attempt, sub string) (json.RawMessage, error) {
	if s.cfg.Ramdisk == nil {
		return nil, proto.Errorf(proto.Unsupported, "boot.prepareRamdisk needs ramdisk join tokens, which this registry does not mint")
	}
	var pool store.Pool
	if err := s.cfg.Store.View(func(tx *store.Tx) (err error) { pool, err = tx.Pool(a.Node.Tenant, a.Node.Pool); return err }); err != nil {
		return nil, err
	}
	extras, err := s.ramdiskExtras(ctx, a.Node, pool)
	if err != nil {
		return nil, err
	}
	sent, out, err := a.RelayMade(ctx, profile.Site, sub, proto.CommandPrepareRamdisk, func() (workflow.CommandInput, error) {
		var in proto.PrepareRamdisk
		err := a.Update(func(tx *store.Tx) (err error) { in, err = s.cfg.Ramdisk.Prepare(tx, a.Node, a.Run.ID); return err })
		if err != nil {
			return workflow.CommandInput{}, err
		}
		in.Extras, in.SecureBoot = extras, pool.Policy.SecureBoot
		return workflow.CommandInput{Payload: mustJSON(in)}, nil
	})
	if err != nil {
		return nil, err
	}
	var in proto.PrepareRamdisk
	if err := json.Unmarshal(sent.Payload, &in); err != nil {
		return nil, proto.Errorf(proto.Internal, "the boot.prepareRamdisk this attempt relayed does not decode: %v", err)
	}
	if err := s.cfg.Ramdisk.Joinable(ctx, in.Token); err != nil {
		return nil, err
	}
	return out, nil
}

// ramdiskExtras are the extra initrds of node's ramdisk boots: its pool's
// policy.ramdiskExtras, each resolved as the pool's tenant resolves it, of kind ramdisk,
// verified as every ramdisk is (a platform signer's signature; never unsigned) and held
// ready by the site's cache. The first that is not fails the step with why (reason
// not-ramdisk, unsigned, signature, untrusted-signer or not-cached), at its path, and
// the machine is not booted.
func (s *Service) ramdiskExtras(ctx context.Context, node store.Node, pool store.Pool) ([]proto.RamdiskExtra, error) {
	if len(pool.Policy.RamdiskExtras) == 0 {
		return nil, nil
	}
	if s.cfg.Images == nil {
		return nil, proto.Errorf(proto.Unsupported, "pool %s names extra initrds, and this registry has no image catalog to verify them", pool.Name)
	}
	var out []proto.RamdiskExtra
	for i, ref := range pool.Policy.RamdiskExtras {
		path := fmt.Sprintf("policy.ramdiskExtras[%d]", i)
		img, err := s.cfg.Images.Resolve(ctx, node.Tenant, ref)
		if err == nil {
			err = proto.CheckRamdiskExtra(img.Ref, proto.ImageKind(img.Kind))
		}
		if err == nil {
			err = s.cfg.Images.VerifyForUse(ctx, node.Tenant, img, false)
		}
		if err != nil {
			return nil, proto.AsError(err).WithPath(path)
		}
		// The site puts the extra's URL, with a capability of its own, in the boot
		// script; this one only says whether the cache holds it.
		url, err := s.cfg.Images.CacheURL(ctx, node.Site, img, time.Time{})
		if err != nil {
			return nil, err
		}
		if url == "" {
			return nil, proto.Errorf(proto.InvalidState, "site %s's cache does not hold pool %s's extra initrd %s yet: the site fetches it as it pre-warms images (`sites cache-plan %s` shows whether it is planned); retry once it is cached", node.Site, pool.Name, ref, node.Site).WithPath(path).WithReason(proto.ReasonNotCached)
		}
		out = append(out, proto.RamdiskExtra{Ref: img.Ref, Digest: img.SHA256})
	}
	return out, nil
}

// refreshInventory is inventory.refresh: it relays the enrolled identity to the agent
// the step runs on, which checks it against the machine it runs on. On a ramdisk it warns
// of each disk that hides capacity from a wipe (warnHidden). On a ramdisk whose
// node has no TPM enrolled, where the pool's measured-boot policy is not off, it then
// enrolls the TPM (enrollTPM): first contact, at inspection.
func (s *Service) refreshInventory(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	input, err := proto.Marshal(proto.InventoryRefresh{ProductUUID: a.Node.ProductUUID, MAC: a.Node.BoundMAC})
	if err != nil {
		return nil, err
	}
	out, err := a.Relay(ctx, a.Step.On, "", proto.CommandInventoryRefresh, input)
	if err != nil || a.Step.On != profile.Ramdisk {
		return out, err
	}
	if err := s.warnHidden(a, out); err != nil {
		return nil, err
	}
	policy, _, enrolled, err := s.measuredBootState(a.Node)
	if err != nil || enrolled || bootMode(policy) == proto.MeasuredBootOff {
		return out, err
	}
	if _, err := s.enrollTPM(ctx, a); err != nil {
		return nil, err
	}
	return out, nil
}
