package store

import (
	"bytes"
	"fmt"

	"github.com/better-compute/better-compute/proto"
)

// bucketNodesByBMC indexes the BMCs nodes bind: site \0 host \0 node id -> the node's
// tenant, host being bmcHost of the node's bmc.address. A retired node binds none.
const bucketNodesByBMC = "nodes_by_bmc"

// nodesByBMC is bucketNodesByBMC as a node index.
var nodesByBMC = nodeIndex{
	bucket: bucketNodesByBMC,
	entries: func(n Node) map[string]string {
		if key := nodeBMCKey(n); key != nil {
			return map[string]string{string(key): n.Tenant}
		}
		return nil
	},
	missing: func(id, key string) error {
		return fmt.Errorf("store: node %s binds a BMC with no %s entry %q", id, bucketNodesByBMC, key)
	},
	stale: func(key, id string) error {
		return fmt.Errorf("store: %s/%q names a BMC node %s does not bind (another, or none: retired)", bucketNodesByBMC, key, id)
	},
}

// nodeBMCKey is node n's entry in bucketNodesByBMC; nil when n binds no BMC (it is not
// stored yet, has no BMC address or is retired).
func nodeBMCKey(n Node) []byte {
	if n.ID == "" || n.BMC.Address == "" || n.State == NodeRetired {
		return nil
	}
	return []byte(n.Site + "\x00" + bmcHost(n.BMC.Address) + "\x00" + n.ID)
}

// bmcHolders is the prefix of the entries of the nodes that bind key's BMC.
func bmcHolders(key []byte) []byte { return key[:bytes.LastIndexByte(key, 0)+1] }

// indexBMC keeps bucketNodesByBMC for node n, which was old (the zero Node when n is
// new), and refuses a binding that takes another tenant's BMC: one tenant's BMC drives
// no other tenant's machine. When n's binding changed (its BMC, or who bound it) and a
// node of another tenant binds the same BMC host at n's site, it is CONFLICT at
// bmc.address, without that node or tenant, unless a root-tenant credential bound n's
// (PlatformBMC: a platform-run service may serve machines of several tenants). Nodes of
// one tenant share a BMC freely (a Redfish service with several systems).
func (t *Tx) indexBMC(old, n Node) error {
	key := nodeBMCKey(n)
	if key != nil && !n.PlatformBMC && (n.BMC != old.BMC || n.PlatformBMC != old.PlatformBMC) {
		taken := false
		_, _, err := t.walk(bucketNodesByBMC, bmcHolders(key), nil, func() bool { return taken }, func(_, tenant []byte) error {
			taken = string(tenant) != n.Tenant
			return nil
		})
		if err != nil {
			return err
		}
		if taken {
			return proto.Errorf(proto.Conflict, "BMC %s is bound already, by another tenant: a BMC drives the machines of one tenant; if it is yours, ask the platform's operators", bmcHost(n.BMC.Address)).WithPath("bmc.address")
		}
	}
	_, err := t.writeEntries(nodesByBMC, old, n)
	return err
}
