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
	// FailedWorkflow is, for a node's, the workflow it failed (it ran at the epoch that
	// moved, so its agents and join tokens were cut off); empty when it failed none, and
	// for a revocation stored before revocations recorded it.
	FailedWorkflow string `json:"failedWorkflowId,omitempty"`
	// FailedKind is the kind of FailedWorkflow (deploy, inspect, remediate...), which
	// says what runs it again (metal.RunAgain); empty when it failed none, and for a
	// revocation stored before revocations recorded it.
	FailedKind string `json:"failedKind,omitempty"`
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
	t.store.watch.siteIdentity.afterCommit(t, s)
	deleted, err := t.DeleteUnusedJoinTokens(id)
	return s, deleted, err
}

// OnSiteIdentity registers fn to be called after every commit that revoked a site
// agent's certificates (RevokeSiteAgent), with the site as stored, until the returned
// cancel is called: a site agent whose certificate no longer passes Site.CheckAgent is
// to be let go. fn runs on the committing goroutine after the store's locks are
// released, so it must return quickly. On etcd it also runs for every site another
// replica wrote, on the store's watch goroutine, as OnNodeIdentity does for nodes.
func (s *Store) OnSiteIdentity(fn func(Site)) (cancel func()) {
	return s.watch.siteIdentity.add(fn)
}

// CheckAgent checks a certificate of the site's agent that names epoch: one older than
// the site's identity epoch is FORBIDDEN, reason revoked (sites revoke-identity).
func (s Site) CheckAgent(epoch int64) error {
	return siteIdentity{s.ID, s.IdentityEpoch, s.AgentRevoked}.checkAgent(epoch)
}

// siteIdentity is the part of a site's record its agent's certificates are checked
// against, its fields named as Site's: read alone on every site agent's hello, push and
// relayed command (Tx.CheckAgent).
type siteIdentity struct {
	ID            string      `json:"id"`
	IdentityEpoch int64       `json:"identityEpoch"`
	AgentRevoked  *Revocation `json:"agentRevoked"`
}

// siteIdentity reads site id's identity; false for an id no site has.
func (t *Tx) siteIdentity(id string) (siteIdentity, bool, error) {
	var s siteIdentity
	ok, err := t.get(bucketSites, []byte(id), &s)
	return s, ok, err
}

func (s siteIdentity) checkAgent(epoch int64) error {
	if epoch >= s.IdentityEpoch {
		return nil
	}
	r := Revocation{Epoch: s.IdentityEpoch, Reason: "an operator revoked it"}
	if s.AgentRevoked != nil {
		r = *s.AgentRevoked
	}
	return r.refusal(s.ID, proto.RoleSite, epoch)
}
