package site

import (
	"encoding/json"
	"net"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// discoveries proposes, for each machine a site agent reports with a product UUID, its
// MAC to the node of the agent's site enrolled with that UUID and no MAC, and binds it at
// once when the node's pool trusts its provisioning network. It reads the machines a
// site keeps (proto.MaxDiscoveries), and logs a report's malformed MACs in one line: a
// section of more, which only a site agent's key sends, would otherwise cost a write
// and a line for each machine, at every report.
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
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		malformed, first := 0, ""
		defer func() {
			if malformed > 0 {
				s.cfg.Log.Warn("discovery with a malformed MAC left out", "node", r.node, "count", malformed, "first", proto.Quote(first))
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
				return err
			}
			if Agent(n.Site) != r.node {
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
	})
	if err != nil {
		s.cfg.Log.Error("recording discoveries", "node", r.node, "err", err)
	}
}
