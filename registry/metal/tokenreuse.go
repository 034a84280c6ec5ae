package metal

import (
	"context"
	"fmt"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// TokenReused is join.Reuses: a ramdisk join token presented again after its join
// (refused token-used) is told on the token's node, in its event log (store.EventTokenReused),
// naming the address of its join and the address it came from again, what that may mean
// and what to do. A ramdisk token is handed to the machine in the boot script the site
// serves over plain HTTP on the provisioning network, so a host that takes the machine's
// address there can read it and join first as the node's ramdisk: it is then sent the
// node's deploy.image, with the next installation's user data and join token.
//
// How it is told depends on what the registry can tell apart:
//   - from another address than its join's, while the workflow that prepared the token
//     runs, the registry contains it, in the transaction that records it: it moves the
//     node's identity epoch (the ramdisk that joined with the token loses its session and
//     its certificate), deletes the node's unused join tokens (the provisioned token a
//     deploy.image carries) and fails the workflow FORBIDDEN, reason token-reused. The
//     machine's own ramdisk presents it again only from the address of its join
//     (rebooted into the same boot entry, or restarted before it kept its join), unless
//     the machine's address changed between two boots of one boot entry: that deploy
//     fails too, and is run again.
//   - from another address once that workflow ended, nothing is changed: the event says
//     how to revoke the node's agents.
//   - from the address of its join while the ramdisk that join admitted holds a session,
//     the event says that a machine rebooted faster than its old session ended and a
//     host that took the machine's address look the same here.
//   - from the address of its join after that session ended (or before it opened one),
//     the event says it is the machine's own ramdisk again: a theft from the machine's own
//     address whose ramdisk left looks the same, and is not told as one.
//
// Tokens of other kinds, and tokens of a node that is gone, are not told on a node.
func (s *Service) TokenReused(ctx context.Context, tok store.JoinToken, from string) error {
	if tok.Kind != store.TokenRamdisk {
		return nil
	}
	presence, err := s.cfg.Joins.Presence(ctx, tok.NodeID, string(proto.RoleRamdisk))
	if err != nil {
		return err
	}
	address := tok.ReusedFrom(from)
	var failed string
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		failed = ""
		node, err := tx.Node(tok.NodeID)
		if proto.CodeOf(err) == proto.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		e := store.Event{Node: node.ID, Tenant: node.Tenant, Kind: store.EventTokenReused,
			From: orUnknown(tok.UsedFrom), To: orUnknown(from)}
		told := fmt.Sprintf("The ramdisk join token %s of this node was presented again from %s; its join came from %s at %s.",
			tok.ID, e.To, e.From, tok.UsedAt.Format(time.RFC3339))
		switch {
		case address == store.ReusedFromOtherAddress:
			run, err := preparedBy(tx, node, tok)
			if err != nil {
				return err
			}
			const mayMean = " Another host may have read the token from the boot script the site serves on the provisioning network, and joined as this node's ramdisk first."
			if run == "" {
				e.Detail = told + mayMean + " No workflow that prepared it runs any more, so nothing was changed: unless both addresses are this machine's, " +
					"revoke the node's agents (nodes revoke-identity), deploy it again, check the installed agent of any machine that got its deploy.image, " +
					"and set the pool's policy.measuredBoot."
				break
			}
			e.Workflow, e.Error = run, proto.Errorf(proto.Forbidden, "the ramdisk join token of node %s was presented again from %s after its join from %s: another host may have joined as its ramdisk, "+
				"so the node's identity epoch moved and its unused join tokens are deleted; set policy.measuredBoot on pool %s and deploy the node again", node.ID, e.To, e.From, node.Pool).WithReason(proto.ReasonTokenReused)
			if _, err := s.cfg.Engine.Fail(tx, run, e.Error); err != nil {
				return err
			}
			if _, err := updateNode(tx, node.ID, func(n *store.Node) error { n.NewIdentityEpoch(tx.Now()); return nil }); err != nil {
				return err
			}
			deleted, err := tx.DeleteUnusedJoinTokens(node.ID)
			if err != nil {
				return err
			}
			failed = run
			e.Detail = told + mayMean + fmt.Sprintf(" The registry moved the node's identity epoch (the ramdisk that joined with the token lost its certificate), deleted %d unused join token(s) of the node "+
				"and failed workflow %s. Set the pool's policy.measuredBoot, deploy the node again, and check the installed agent of any machine that got its deploy.image "+
				"(unless both addresses are this machine's: a machine whose address changed between two boots of one boot entry looks the same).", deleted, run)
		case address == store.ReusedFromUnknownAddress:
			e.Detail = told + " The address of one of the two joins is unknown, so the registry cannot tell this machine's ramdisk booted again from another host that read the token: " +
				"if the machine was not rebooted, revoke the node's agents (nodes revoke-identity) and set the pool's policy.measuredBoot."
		case presence.Live:
			e.Detail = told + " The ramdisk that join admitted still holds a session: a machine rebooted faster than its old session ended and another host that took the machine's address " +
				"look the same here, and the registry cannot tell them apart. If the machine was not rebooted, revoke the node's agents (nodes revoke-identity), deploy it again " +
				"and set the pool's policy.measuredBoot."
		default:
			e.Detail = told + " The session that join opened has ended (or never opened): this machine's ramdisk again, booted anew into its standing boot entry or restarted before it kept its join. " +
				"Nothing to do: a workflow that needs the ramdisk boots it with a new token."
		}
		_, err = tx.AppendEvent(e)
		return err
	})
	if err == nil && failed != "" {
		s.cfg.Engine.Abort(failed)
		s.cfg.Log.Warn("a ramdisk join token was presented again from another address: the workflow that prepared it failed", "node", tok.NodeID,
			"workflow", failed, "from", from, "joinFrom", tok.UsedFrom, "reason", proto.ReasonTokenReused)
	}
	return err
}

// preparedBy is the run of node's that prepared the ramdisk token tok, while it runs: a
// ramdisk token is minted by its node's workflow (boot.prepareRamdisk, metal.ensureRamdisk),
// and a node runs one workflow at a time, so a run created before tok and still running
// (and not cancelled) is that one. "" when none is.
func preparedBy(tx *store.Tx, node store.Node, tok store.JoinToken) (string, error) {
	running, err := workflowRunning(tx, node)
	if err != nil || !running {
		return "", err
	}
	run, err := tx.Run(node.Workflow)
	if err != nil || run.Cancelled != nil || run.CreatedAt.After(tok.CreatedAt) {
		return "", err
	}
	return run.ID, nil
}

// orUnknown is an address, or "unknown" for none.
func orUnknown(addr string) string {
	if addr == "" {
		return "unknown"
	}
	return addr
}
