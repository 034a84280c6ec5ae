package store

import (
	"bytes"
	"time"

	"github.com/better-compute/better-compute/proto"
)

const (
	// bucketNodesByBMC indexes the BMCs nodes bind: site \0 host \0 node id -> the node's
	// tenant, host being bmcHost of the node's bmc.address. A retired node binds none.
	bucketNodesByBMC = "nodes_by_bmc"
	// bucketUpgrades marks the upgrades done on the store's records: name -> when.
	bucketUpgrades = "store_upgrades"
	// upgradeNodesByBMC is the upgrade that indexed the nodes enrolled before
	// bucketNodesByBMC existed.
	upgradeNodesByBMC = "nodes_by_bmc"
	// upgradeChunk bounds the nodes one upgrading transaction indexes.
	upgradeChunk = 100
)

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
	was, key := nodeBMCKey(old), nodeBMCKey(n)
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
	if bytes.Equal(was, key) {
		return nil
	}
	if was != nil {
		if err := t.del(bucketNodesByBMC, was); err != nil {
			return err
		}
	}
	if key == nil {
		return nil
	}
	return t.putRaw(bucketNodesByBMC, key, []byte(n.Tenant))
}

// upgradeNodesBMC indexes the BMCs of the nodes a store written before bucketNodesByBMC
// existed holds, in transactions of upgradeChunk nodes, and marks it done: once per
// store, whichever backend and replica opens it first (another doing it at the same time
// writes the same entries). A store without nodes is left unwritten (a store copy's
// destination must stay empty).
func (s *Store) upgradeNodesBMC() error {
	done := false
	err := s.View(func(tx *Tx) error {
		first, _ := tx.kv.cursor(bucketNodes).First()
		done = first == nil || tx.getRaw(bucketUpgrades, []byte(upgradeNodesByBMC)) != nil
		return nil
	})
	for cursor := ""; err == nil && !done; {
		var next string
		err = s.Update(func(tx *Tx) error {
			var err error
			next, err = tx.scan(bucketNodes, nil, Page{Cursor: cursor, Limit: upgradeChunk}, func(k, _ []byte) (bool, error) {
				n, err := tx.Node(string(k))
				if key := nodeBMCKey(n); err == nil && key != nil && tx.getRaw(bucketNodesByBMC, key) == nil {
					err = tx.putRaw(bucketNodesByBMC, key, []byte(n.Tenant))
				}
				return true, err
			})
			if err != nil || next != "" {
				return err
			}
			return tx.putRaw(bucketUpgrades, []byte(upgradeNodesByBMC), []byte(tx.now.UTC().Format(time.RFC3339)))
		})
		cursor, done = next, next == ""
	}
	return err
}
