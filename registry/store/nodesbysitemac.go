package store

import (
	"bytes"
	"fmt"
)

// bucketNodesBySiteMAC indexes the boot MACs of the machines enrolled at each site:
// site \0 tenant \0 enrolment time \0 MAC \0 node id -> nothing, the time as
// enrolledOrder writes it, so that a tenant's MACs come in the order its nodes were
// enrolled. A retired node has none.
const bucketNodesBySiteMAC = "nodes_by_site_mac"

// enrolledOrder is how a key of bucketNodesBySiteMAC writes a node's enrolment time: of
// fixed width, sorting as the times do.
const enrolledOrder = "20060102T150405.000000000"

// nodesBySiteMAC is bucketNodesBySiteMAC as a node index.
var nodesBySiteMAC = nodeIndex{
	bucket: bucketNodesBySiteMAC,
	entries: func(n Node) map[string]string {
		if n.ID == "" || n.State == NodeRetired {
			return nil
		}
		out := map[string]string{}
		for _, mac := range n.MACs {
			out[n.Site+"\x00"+n.Tenant+"\x00"+n.CreatedAt.UTC().Format(enrolledOrder)+"\x00"+mac+"\x00"+n.ID] = ""
		}
		return out
	},
	missing: func(id, key string) error {
		return fmt.Errorf("store: node %s has a boot MAC with no %s entry %q", id, bucketNodesBySiteMAC, key)
	},
	stale: func(key, id string) error {
		return fmt.Errorf("store: %s/%q names a MAC node %s does not have (another, or none: retired)", bucketNodesBySiteMAC, key, id)
	},
}

// indexSiteMACs keeps bucketNodesBySiteMAC for node n, which was old (the zero Node when
// n is new), and, when n's entries changed (it was enrolled with MACs, was bound one, or
// retired), tells the OnSiteMACs hooks of n's site after the commit.
func (t *Tx) indexSiteMACs(old, n Node) error {
	changed, err := t.writeEntries(nodesBySiteMAC, old, n)
	if changed && err == nil {
		t.store.watch.siteMACs.afterCommit(t, n)
	}
	return err
}

// SiteMAC is a boot MAC enrolled at a site, and the node that has it.
type SiteMAC struct {
	MAC  string
	Node string
}

// SiteMACs are the boot MACs of the machines enrolled in the pools of site that are not
// retired, by tenant: each tenant's in the order its nodes were enrolled. It reads the
// index alone, never a node's record.
func (t *Tx) SiteMACs(site string) (map[string][]SiteMAC, error) {
	prefix := []byte(site + "\x00")
	out := map[string][]SiteMAC{}
	_, _, err := t.walk(bucketNodesBySiteMAC, prefix, nil, func() bool { return false }, func(k, _ []byte) error {
		parts := bytes.Split(k[len(prefix):], []byte{0}) // tenant, time, MAC, id
		if len(parts) != 4 {
			return fmt.Errorf("store: %s/%q is not an entry of the index", bucketNodesBySiteMAC, k)
		}
		out[string(parts[0])] = append(out[string(parts[0])], SiteMAC{MAC: string(parts[2]), Node: string(parts[3])})
		return nil
	})
	return out, err
}

// OnSiteMACs registers fn to be called after every commit that changed the MACs enrolled
// at a site (SiteMACs: a node enrolled with MACs, bound one, or retired), with the site,
// until the returned cancel is called. fn runs on the committing goroutine after the
// store's locks are released, so it must return quickly. On etcd it also runs for every
// node another replica wrote (changed MACs or not: the watch tells the record, not what
// changed), on the store's watch goroutine.
func (s *Store) OnSiteMACs(fn func(site string)) (cancel func()) {
	return s.watch.siteMACs.add(func(n Node) { fn(n.Site) })
}
