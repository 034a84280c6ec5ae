package store

import (
	"slices"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// MACProposal is a MAC a site agent saw network-booting with a node's product UUID.
type MACProposal struct {
	MAC string `json:"mac"`
	// Site is the site whose agent saw it.
	Site string `json:"siteId"`
	// SeenAt is when the site agent first saw the machine boot from it.
	SeenAt time.Time `json:"seenAt"`
}

// NodeByProductUUID returns the node enrolled with a product UUID in either spelling
// (uuidNode), NOT_FOUND when none is.
func (t *Tx) NodeByProductUUID(uuid string) (Node, error) {
	id := t.uuidNode(uuid)
	if id == nil {
		return Node{}, notFound("node with product UUID", uuid)
	}
	return t.Node(string(id))
}

// uuidNode is the id of the node enrolled with product UUID uuid, nil when none is. A
// UUID names one machine in both its spellings (proto.SwappedProductUUID: dmidecode's and
// Redfish's, and the bytes DHCP option 97 sends), so the node enrolled with the other
// spelling is the machine's too; the one enrolled with uuid as written comes first.
func (t *Tx) uuidNode(uuid string) []byte {
	uuid = strings.ToLower(uuid)
	if id := t.getRaw(bucketNodesByHW, []byte("uuid:"+uuid)); id != nil {
		return id
	}
	if other, ok := proto.SwappedProductUUID(uuid); ok {
		return t.getRaw(bucketNodesByHW, []byte("uuid:"+other))
	}
	return nil
}

// ProposeMAC stores a MAC proposal on a node and reports whether it changed anything:
// a node that has MACs, or already holds this proposal, is left as it is, and a MAC a
// node holds already is proposed to none (it is another machine's, or this UUID's node
// is not that machine's: either way the proposal would show a machine's MAC to a node
// that can never bind it, perhaps another tenant's).
func (t *Tx) ProposeMAC(id string, p MACProposal) (bool, error) {
	n, err := t.Node(id)
	if err != nil {
		return false, err
	}
	if len(n.MACs) > 0 || n.MACProposal != nil && n.MACProposal.MAC == p.MAC || t.getRaw(bucketNodesByHW, []byte("mac:"+p.MAC)) != nil {
		return false, nil
	}
	_, err = t.UpdateNode(id, func(n *Node) error { n.MACProposal = &p; return nil })
	return err == nil, err
}

// BindMAC makes the MAC PXE discovery proposed for a node enrolled by its product UUID
// alone the node's boot MAC: it becomes its one MAC (a hardware key, so no other node
// can enroll it) and its BoundMAC, and the proposal goes. A node that has MACs already,
// or no proposal, is INVALID_STATE; a mac other than the proposal's, or one that is not
// among the NICs the node's BMC listed (when it listed any, and unless unlisted), is
// INVALID_INPUT; a MAC another node holds is CONFLICT, naming no node.
func (t *Tx) BindMAC(id, mac string, unlisted bool) (Node, error) {
	old, err := t.Node(id)
	if err != nil {
		return old, err
	}
	switch {
	case len(old.MACs) > 0:
		return old, proto.Errorf(proto.InvalidState, "node %s has its MACs already (%s): nothing to confirm", id, strings.Join(old.MACs, ", ")).WithReason(proto.ReasonHasMAC)
	case old.MACProposal == nil:
		return old, proto.Errorf(proto.InvalidState, "PXE discovery proposes no MAC for node %s: power-cycle the machine into PXE (a workflow's metal.ensureRamdisk does) and wait for `nodes get` to show a proposal", id).WithReason(proto.ReasonNoProposal)
	case old.MACProposal.MAC != mac:
		return old, proto.Errorf(proto.InvalidInput, "PXE discovery proposes MAC %s for node %s, not %s: confirm the proposed one", old.MACProposal.MAC, id, mac).WithPath("mac")
	case len(old.BMCMACs) > 0 && !slices.Contains(old.BMCMACs, mac) && !unlisted:
		return old, proto.Errorf(proto.InvalidInput, "the BMC of node %s lists the NICs %s, and not %s: another machine on the provisioning network may have sent its product UUID; check which machine has %s, and confirm it with force only if it is this one's boot NIC the BMC does not list",
			id, strings.Join(old.BMCMACs, ", "), mac, mac).WithPath("mac").WithReason(proto.ReasonNotListedByBMC)
	}
	if t.getRaw(bucketNodesByHW, []byte("mac:"+mac)) != nil {
		return old, proto.Errorf(proto.Conflict, "MAC %s is enrolled already: a machine is enrolled once", mac).WithPath("mac")
	}
	if err := t.putRaw(bucketNodesByHW, []byte("mac:"+mac), []byte(id)); err != nil {
		return old, err
	}
	n := old
	n.MACs, n.BoundMAC, n.MACProposal = []string{mac}, mac, nil
	n.Rev, n.UpdatedAt = old.Rev+1, t.now
	if err := t.indexSiteMACs(old, n); err != nil {
		return old, err
	}
	return n, t.put(bucketNodes, []byte(id), n)
}
