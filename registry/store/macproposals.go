package store

import (
	"strings"
	"time"
)

// MACProposal is a MAC a site agent saw network-booting with a node's product UUID.
type MACProposal struct {
	MAC string `json:"mac"`
	// Site is the site whose agent saw it.
	Site string `json:"siteId"`
	// SeenAt is when the site agent first saw the machine boot from it.
	SeenAt time.Time `json:"seenAt"`
}

// NodeByProductUUID returns the node enrolled with a product UUID (lower-case),
// NOT_FOUND when none is.
func (t *Tx) NodeByProductUUID(uuid string) (Node, error) {
	id := t.getRaw(bucketNodesByHW, []byte("uuid:"+strings.ToLower(uuid)))
	if id == nil {
		return Node{}, notFound("node with product UUID", uuid)
	}
	return t.Node(string(id))
}

// ProposeMAC stores a MAC proposal on a node and reports whether it changed anything:
// a node that has MACs, or already holds this proposal, is left as it is.
func (t *Tx) ProposeMAC(id string, p MACProposal) (bool, error) {
	n, err := t.Node(id)
	if err != nil {
		return false, err
	}
	if len(n.MACs) > 0 || n.MACProposal != nil && n.MACProposal.MAC == p.MAC {
		return false, nil
	}
	_, err = t.UpdateNode(id, func(n *Node) error { n.MACProposal = &p; return nil })
	return err == nil, err
}
