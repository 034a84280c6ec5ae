package store

import (
	"bytes"

	"github.com/better-compute/better-compute/proto"
)

const (
	// bucketNodesByBMC indexes the BMCs nodes bind: site \0 host \0 node id -> the node's
	// tenant, host being bmcHost of the node's bmc.address. A retired node binds none.
	bucketNodesByBMC = "nodes_by_bmc"
	// reindexChunk bounds the entries one reindexing transaction writes.
	reindexChunk = 100
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

// bmcIndexDiff compares bucketNodesByBMC with what the nodes bind, as tx reads them:
// missing are the entries a node should have and does not (key -> its tenant), stale the
// entries no node binds (a node gone, retired, or binding another BMC). Both are empty
// in a store this registry alone wrote.
func (t *Tx) bmcIndexDiff() (missing map[string]string, stale []string, err error) {
	want := map[string]string{}
	_, err = t.scan(bucketNodes, nil, Page{}, func(k, _ []byte) (bool, error) {
		n, err := t.Node(string(k))
		if key := nodeBMCKey(n); err == nil && key != nil {
			want[string(key)] = n.Tenant
		}
		return true, err
	})
	if err != nil {
		return nil, nil, err
	}
	c := t.kv.cursor(bucketNodesByBMC)
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if tenant, ok := want[string(k)]; ok && tenant == string(v) {
			delete(want, string(k))
		} else if !ok {
			stale = append(stale, string(k))
		}
	}
	return want, stale, nil
}

// reindexNodesBMC makes bucketNodesByBMC say what the nodes bind, at every open: it
// indexes the nodes without their entry (a store written before the index existed, or
// a node a replica of an earlier version enrolled since) and drops the entries no node
// binds (such a replica's change of a BMC, or a retire). It reads in one transaction and
// writes only what differs, reindexChunk entries a transaction, each read again there:
// a store that needs nothing is not written (a store copy's destination stays empty),
// and replicas doing it at once write the same.
func (s *Store) reindexNodesBMC() error {
	var missing map[string]string
	var stale []string
	err := s.View(func(tx *Tx) (err error) { missing, stale, err = tx.bmcIndexDiff(); return err })
	keys := stale
	for k := range missing {
		keys = append(keys, k)
	}
	for len(keys) > 0 && err == nil {
		chunk := keys[:min(reindexChunk, len(keys))]
		keys = keys[len(chunk):]
		err = s.Update(func(tx *Tx) error {
			for _, k := range chunk {
				n, err := tx.Node(string(afterLastNUL([]byte(k), nil)))
				if err != nil && proto.CodeOf(err) != proto.NotFound {
					return err
				}
				if want := nodeBMCKey(n); string(want) == k && err == nil {
					err = tx.putRaw(bucketNodesByBMC, want, []byte(n.Tenant))
				} else {
					err = tx.del(bucketNodesByBMC, []byte(k))
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	return err
}
