package join

import (
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/store"
)

// defaultTTL is how long a token of each kind lives unless its maker says otherwise.
var defaultTTL = map[string]time.Duration{
	store.TokenProvisioned: 2 * time.Hour,
	store.TokenRamdisk:     time.Hour,
	store.TokenSite:        24 * time.Hour,
}

// MaxTTL is the longest a join token may live.
const MaxTTL = 30 * 24 * time.Hour

// Retention is how long a join token is kept after it expires, used or not, for
// `tokens list` to show it; PruneTokens deletes it then.
const Retention = 30 * 24 * time.Hour

// PruneTokens deletes the join tokens that expired more than Retention ago, of those
// after the id after, at most store.MaxPruned of them, and returns how many and where to
// go on from (store.Tx.PruneJoinTokens). The registry runs it when it starts and once a
// day, through store.Store.PruneOnward: each transaction walks on from where the one
// before stopped.
func PruneTokens(tx *store.Tx, after []byte) (int, []byte, error) {
	return tx.PruneJoinTokens(tx.Now().Add(-Retention), after)
}

// RoleOf is the role a token of kind joins as: provisioned tokens join nodes, ramdisk
// tokens ramdisks and site tokens site agents.
func RoleOf(kind string) string {
	switch kind {
	case store.TokenProvisioned:
		return joinwire.RoleNode
	case store.TokenRamdisk:
		return joinwire.RoleRamdisk
	case store.TokenSite:
		return joinwire.RoleSite
	}
	return ""
}

// MintToken makes a single-use join token for f (of its kind, for its node, minted by its
// workflow or, when that is "", by an operator) and returns it with its secret, shown
// only now. A ttl of 0 takes the kind's default (provisioned 2h, ramdisk 1h, site 24h). A
// site token needs the site, and its node id is the site's name (the registry finds, and
// revokes, a site's agent by it); the others need the node id. Minting again makes
// another token: the unused one simply expires. A node whose identity is revoked gets
// none (FORBIDDEN). The site, when given, must exist (NOT_FOUND at site: `sites create`
// it first).
func MintToken(tx *store.Tx, f store.TokenFor, ttl time.Duration) (store.JoinToken, string, error) {
	def, ok := defaultTTL[f.Kind]
	if !ok {
		return store.JoinToken{}, "", proto.Errorf(proto.InvalidInput, "token kind %q: the kinds are %v", f.Kind, store.TokenKinds).WithPath("kind")
	}
	if ttl == 0 {
		ttl = def
	}
	if ttl < time.Second || ttl > MaxTTL {
		return store.JoinToken{}, "", proto.Errorf(proto.InvalidInput, "a join token lives 1 second to %s, not %s", MaxTTL, ttl).WithPath("ttlSeconds")
	}
	if f.Site != "" && !proto.IsObjectName(f.Site) {
		return store.JoinToken{}, "", proto.Errorf(proto.InvalidInput, "site %q: use 1 to 63 lower-case letters, digits and hyphens, starting with a letter", f.Site).WithPath("site")
	}
	if f.Site != "" {
		if _, err := tx.Site(f.Site); err != nil {
			return store.JoinToken{}, "", siteNotFound(err, f.Site)
		}
	}
	if f.Kind == store.TokenSite {
		if f.Site == "" {
			return store.JoinToken{}, "", proto.Errorf(proto.InvalidInput, "a site token names its site").WithPath("site")
		}
		if f.NodeID == "" {
			f.NodeID = f.Site
		}
		if f.NodeID != f.Site {
			return store.JoinToken{}, "", proto.Errorf(proto.InvalidInput, "a site's agent is the site: its node id is %q, not %q (leave --node-id out)", f.Site, f.NodeID).WithPath("nodeId")
		}
	}
	if err := proto.CheckNodeID(f.NodeID); err != nil {
		return store.JoinToken{}, "", proto.AsError(err).WithPath("nodeId")
	}
	if err := tx.CheckIdentity(f.NodeID); err != nil {
		return store.JoinToken{}, "", err
	}
	return tx.CreateJoinToken(f, tx.Now().Add(ttl))
}

// siteNotFound turns the store's NOT_FOUND of site into one at path site that says what
// to do; other errors pass unchanged.
func siteNotFound(err error, site string) error {
	if proto.CodeOf(err) != proto.NotFound {
		return err
	}
	return proto.Errorf(proto.NotFound, "site %q does not exist: create it first (sites create %s)", site, site).WithPath("site")
}
