package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Revocation is an operator's revocation of the certificates of an identity's agents:
// a node's (its installed OS's and its ramdisk's) or a site's agent. It moved the
// identity epoch to Epoch, so every certificate issued before it names an earlier one
// and is refused (CheckAgent); the identity itself holds, and joins again with a new
// join token.
type Revocation struct {
	// Epoch is the identity epoch the revocation moved to.
	Epoch int64     `json:"epoch"`
	At    time.Time `json:"at"`
	// Reason is the operator's words, or that an operator asked.
	Reason string `json:"reason"`
	// By is the credential that asked.
	By string `json:"by,omitempty"`
}

// refusal is the FORBIDDEN, reason revoked, of a certificate of agent id in role that
// names epoch, issued before r.
func (r Revocation) refusal(id string, role proto.Role, epoch int64) error {
	agent, next := "node "+id+"'s installed OS agent", "join it again with a new token (tokens create --kind provisioned --node-id "+id+", then bcd join)"
	switch role {
	case proto.RoleRamdisk:
		agent, next = "node "+id+"'s ramdisk", "the ramdisk a workflow boots next joins with the token of that boot"
	case proto.RoleSite:
		agent, next = "site "+id+"'s agent", "join it again with a new site token (tokens create --kind site --site "+id+", then bcd join --role site)"
	}
	return proto.Errorf(proto.Forbidden, "the certificate of %s (epoch %d) was revoked on %s: %s; %s",
		agent, epoch, r.At.UTC().Format(time.RFC3339), r.Reason, next).WithReason(proto.ReasonRevoked)
}

// RevokeSiteAgent revokes every certificate site id's agent holds (sites
// revoke-identity): it moves the site's identity epoch, records r (its Epoch and At
// set here, its Reason checked as proto.OperatorReason checks it) and deletes the site
// agent's unused join tokens, whose number it returns with the site. A site that does
// not exist is NOT_FOUND.
func (t *Tx) RevokeSiteAgent(id string, r Revocation) (Site, int, error) {
	s, err := t.Site(id)
	if err != nil {
		return s, 0, err
	}
	if r.Reason, err = proto.OperatorReason(r.Reason); err != nil {
		return s, 0, err
	}
	s.IdentityEpoch++
	r.Epoch, r.At = s.IdentityEpoch, t.now
	s.AgentRevoked = &r
	if err := t.put(bucketSites, []byte(id), s); err != nil {
		return s, 0, err
	}
	deleted, err := t.DeleteUnusedJoinTokens(id)
	return s, deleted, err
}
