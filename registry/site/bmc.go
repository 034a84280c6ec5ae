package site

import (
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
)

// ExpandBMC completes a command that reaches a machine's BMC (proto.SiteBMCConcerns) as it
// is delivered to agent, a site agent: it attaches the BMC's credential
// (secret.Box.ForBMC), which is never stored with the command. It first checks, against
// the node as enrolled, that agent is the agent of the node's site, that the node's BMC
// address is one its site admits (store.Site.CheckBMCAddress), and that every BMC binding
// of the command names the address and credential reference the node's BMC bound: a
// credential goes to the address it was bound with and nowhere else. A refusal is
// FORBIDDEN, and the command is answered with it, unsent. Other commands pass unchanged.
func ExpandBMC(tx *store.Tx, secrets *secret.Box, agent string, cmd proto.Command) (proto.Command, error) {
	if _, ok := proto.SiteBMCConcerns[cmd.Kind]; !ok {
		return cmd, nil
	}
	var sc proto.SiteCommand
	if err := json.Unmarshal(cmd.Payload, &sc); err != nil {
		return cmd, proto.Errorf(proto.Internal, "%s payload: %v", cmd.Kind, err)
	}
	n, err := tx.Node(sc.Node)
	if err != nil {
		return cmd, err
	}
	if Agent(n.Site) != agent {
		return cmd, proto.Errorf(proto.Forbidden, "node %s is at site %s, not %s: its BMC commands go to its own site's agent", n.ID, n.Site, agent)
	}
	site, err := tx.Site(n.Site)
	if err != nil {
		return cmd, err
	}
	if err := site.CheckBMCAddress(n.BMC.Address, n.PlatformBMC); err != nil {
		return cmd, proto.AsError(err).WithCode(proto.Forbidden)
	}
	for concern, b := range sc.Drivers {
		var cfg struct {
			Address       string `json:"address"`
			CredentialRef string `json:"credentialRef"`
		}
		if !isBMCConcern(concern) {
			continue
		}
		if err := json.Unmarshal(b.Config, &cfg); err != nil || cfg.Address != n.BMC.Address || cfg.CredentialRef != n.BMC.CredentialRef {
			return cmd, proto.Errorf(proto.Forbidden, "node %s: the %s binding of %s names another BMC than the one enrolled: a credential is sent to the address it was bound with only", n.ID, concern, cmd.Kind).
				WithPath("drivers." + concern)
		}
	}
	if sc.Credential, err = secrets.ForBMC(tx, n); err != nil {
		return cmd, err
	}
	cmd.Payload, err = proto.Marshal(sc)
	return cmd, err
}

// isBMCConcern reports whether concern is bound to the machine's BMC.
func isBMCConcern(concern string) bool {
	for _, c := range proto.SiteBMCConcerns {
		if c == concern {
			return true
		}
	}
	return false
}
