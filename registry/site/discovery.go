package site

import (
	"encoding/json"
	"net"
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// discoveries proposes, for each machine a site agent reports with a product UUID, its
// MAC to the node of the agent's site enrolled with that UUID and no MAC, and binds it at
// once when the node's pool trusts its provisioning network. It reads the machines a
// site keeps (proto.MaxDiscoveries), and logs a report's malformed MACs in one line: a
// section of more, which only a site agent's key sends, would otherwise cost a write
// and a line for each machine, at every report. It reads the report in one transaction
// and writes each node it changes in one of its own (propose): a node's record may take
// half a MiB (its labels and driver configs), and any tenant may have pools at the site,
// so one transaction for the whole report took every tenant's nodes it changed, and a
// few large ones of one tenant were more than etcd takes: the report recorded nothing,
// for any tenant, at each report.
func (s *Service) discoveries(r report) {
	var list []proto.Discovery
	if err := json.Unmarshal(r.data, &list); err != nil {
		s.cfg.Log.Warn("discoveries section", "node", r.node, "err", err)
		return
	}
	if len(list) > proto.MaxDiscoveries {
		s.cfg.Log.Warn("discoveries section lists more machines than a site keeps: the first read", "node", r.node, "machines", len(list), "read", proto.MaxDiscoveries)
		list = list[:proto.MaxDiscoveries]
	}
	var due [][]proto.Discovery
	err := s.cfg.Store.View(func(tx *store.Tx) (err error) {
		due, err = s.discovered(tx, r.node, list)
		return err
	})
	if err != nil {
		s.cfg.Log.Error("recording discoveries", "node", r.node, "err", err)
		return
	}
	for _, ds := range due {
		if err := s.cfg.Store.Update(func(tx *store.Tx) error { return s.propose(tx, r.node, ds) }); err != nil {
			s.cfg.Log.Error("recording a discovery", "node", r.node, "mac", ds[0].MAC, "err", err)
		}
	}
}

// discovered is what of list, agent's report, may change a node, by node in the order
// the report first names each: the machines of a well-formed MAC (in its one spelling)
// whose product UUID a node of agent's site was enrolled with, of a node that has no MAC
// and one of them not its proposal yet, in report order. Malformed MACs are logged in
// one line.
func (s *Service) discovered(tx *store.Tx, agent string, list []proto.Discovery) ([][]proto.Discovery, error) {
	var due [][]proto.Discovery
	at := map[string]int{} // node id -> its index in due
	malformed, first := 0, ""
	defer func() {
		if malformed > 0 {
			s.cfg.Log.Warn("discovery with a malformed MAC left out", "node", agent, "count", malformed, "first", proto.Quote(first))
		}
	}()
	for _, d := range list {
		if d.ProductUUID == "" {
			continue
		}
		// What a site reports is checked like what an operator enrolls: a MAC of six
		// bytes, kept in one spelling.
		hw, err := net.ParseMAC(d.MAC)
		if err != nil || len(hw) != 6 {
			if malformed++; malformed == 1 {
				first = d.MAC
			}
			continue
		}
		d.MAC = hw.String()
		n, err := tx.NodeByProductUUID(d.ProductUUID)
		if proto.CodeOf(err) == proto.NotFound {
			continue
		}
		if err != nil {
			return nil, err
		}
		if Agent(n.Site) != agent || len(n.MACs) > 0 {
			continue
		}
		i, ok := at[n.ID]
		if !ok {
			i, at[n.ID] = len(due), len(due)
			due = append(due, nil)
		}
		due[i] = append(due[i], d)
	}
	// A node whose machines all name its proposal changes nothing.
	return slices.DeleteFunc(due, func(ds []proto.Discovery) bool {
		n, err := tx.NodeByProductUUID(ds[0].ProductUUID)
		return err == nil && !slices.ContainsFunc(ds, func(d proto.Discovery) bool { return n.MACProposal == nil || n.MACProposal.MAC != d.MAC })
	}), nil
}

// propose proposes the MACs of ds, the machines of one node checked by discovered, to
// the node of agent's site enrolled with their product UUID, as tx reads it, one after
// the other as the report names them, and binds one when the node's pool trusts its
// provisioning network.
func (s *Service) propose(tx *store.Tx, agent string, ds []proto.Discovery) error {
	for _, d := range ds {
		n, err := tx.NodeByProductUUID(d.ProductUUID)
		if proto.CodeOf(err) == proto.NotFound {
			continue
		}
		if err != nil {
			return err
		}
		if Agent(n.Site) != agent {
			continue
		}
		changed, err := tx.ProposeMAC(n.ID, store.MACProposal{MAC: d.MAC, Site: n.Site, SeenAt: d.FirstSeen})
		if err != nil {
			return err
		}
		if !changed {
			continue
		}
		s.cfg.Log.Info("PXE discovery proposes a MAC", "node", n.ID, "mac", d.MAC, "site", n.Site)
		pool, err := tx.Pool(n.Tenant, n.Pool)
		if err != nil || !pool.Policy.TrustProvisioningNetwork {
			continue
		}
		if _, err := tx.BindMAC(n.ID, d.MAC, false); err != nil {
			s.cfg.Log.Warn("binding the proposed MAC", "node", n.ID, "mac", d.MAC, "err", err)
			continue
		}
		s.cfg.Log.Info("bound the proposed MAC: the pool trusts its provisioning network", "node", n.ID, "mac", d.MAC)
	}
	return nil
}
