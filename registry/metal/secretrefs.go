package metal

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// checkSecretRefs refuses to run p, a profile of owner, on node when p names a secret
// reference and owner is neither the node's tenant, the platform (the root tenant) nor
// the shipped profiles': INVALID_STATE, reason foreign-secret-ref, at the reference's
// field. A node's agent is handed the secrets its NodeSpec names from its own tenant's
// store (secret.ForAgent), so another tenant's profile naming one would have the
// deploying tenant's secret sent where that tenant chose (a k8s-join's server), as an
// image is trusted only by the deploying tenant's signers. A unit the node's pool's
// policy sets replaces the profile's and is the tenant's own choice.
func checkSecretRefs(tx *store.Tx, node store.Node, owner string, p *profile.Profile) error {
	if owner == node.Tenant || owner == store.RootTenant || owner == profile.ShippedTenant {
		return nil
	}
	pool, err := tx.Pool(node.Tenant, node.Pool)
	if err != nil {
		return err
	}
	path, ref := secretRefOf(p, pool.Policy)
	if path == "" {
		return nil
	}
	return proto.Errorf(proto.InvalidState, "profile %s/%s@%d names the secret %s at %s: a node is handed its own tenant's secret of that name, so a profile of another tenant may name none; copy the profile into your tenant (`profiles create`), where its references are yours to choose",
		owner, p.ID(), p.Version(), ref, path).WithPath(path).WithReason(proto.ReasonForeignSecretRef)
}

// secretRefOf is the first secret reference p names, with its path in the document: a
// host unit's (one that policy's units do not replace), or a driver's credentialRef;
// "" when it names none.
func secretRefOf(p *profile.Profile, policy store.PoolPolicy) (path, ref string) {
	pooled := PoolUnits(policy)
	for _, u := range p.HostConfig() {
		if slices.ContainsFunc(pooled, func(pu store.HostUnit) bool { return pu.Unit == u.Name }) {
			continue
		}
		for _, f := range hostunit.SecretFields(proto.HostUnit{Unit: u.Name, Settings: u.Settings}) {
			return "hostConfig." + u.Name + "." + f.Field, f.Ref
		}
	}
	drivers := p.Drivers()
	for _, c := range slices.Sorted(maps.Keys(drivers)) {
		var config struct {
			CredentialRef string `json:"credentialRef"`
		}
		if json.Unmarshal(drivers[c].Config, &config) == nil && config.CredentialRef != "" {
			return "drivers." + c + ".config.credentialRef", config.CredentialRef
		}
	}
	return "", ""
}
