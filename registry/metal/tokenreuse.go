package metal

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// reuseOf is what TokenReused knows of a kind of join token it tells on.
type reuseOf struct {
	// role is the agent the token's join admitted; agent names it in the event.
	role  proto.Role
	agent string
	// mayMean is how another host may have come to hold the token, and what it got by
	// joining with it first.
	mayMean string
	// heldIdentity is whether the token's join hands its agent the node's identity for
	// as long as the node's identity epoch stays where the join found it, workflow or
	// not: a reuse from another address is then contained while that epoch holds. Both
	// kinds do: a ramdisk's certificate is taken while the workflow that minted its token
	// runs (a rescue's until the node's next workflow: store.Tx.CheckAgent), and a host
	// that joined first as a deploy's ramdisk may have answered the deploy itself and joined
	// with its provisioned token before the machine's ramdisk came, so the machine never
	// reaches an installed OS to tell on it.
	heldIdentity bool
	// readable is whether other hosts may read the token where it travels (a boot script
	// the site serves over plain HTTP), even after its join: a reuse from another address
	// once no workflow that minted it runs is then contained only while the token lives.
	// The machine's own agent arriving second comes with it within that time; a host that
	// read it after the machine's join cannot cut the node's installed OS off long after.
	readable bool
}

// reusedKinds are the kinds of join token TokenReused tells on, by kind.
var reusedKinds = map[string]reuseOf{
	store.TokenRamdisk: {role: proto.RoleRamdisk, agent: "ramdisk", heldIdentity: true, readable: true,
		mayMean: " Another host may have read the token from the boot script the site serves on the provisioning network, and joined as this node's ramdisk first."},
	store.TokenProvisioned: {role: proto.RoleNode, agent: "installed OS", heldIdentity: true,
		mayMean: " Another host may have read the token from the user data of this node's installation (a host that joined first as its ramdisk is sent them with deploy.image), " +
			"and joined as this node's installed OS first: it would hold the node's identity and get its NodeSpecs."},
}

// TokenReused is join.Reuses: a ramdisk or provisioned join token presented again after
// its join (refused token-used) is told on the token's node, in its event log
// (store.EventTokenReused), naming the address of its join and the address it came from
// again, what that may mean and what to do. A ramdisk token is handed to the machine in
// the boot script the site serves over plain HTTP on the provisioning network, so a host
// that takes the machine's address there can read it and join first as the node's
// ramdisk: it is then sent the node's deploy.image, with the next installation's user
// data and its provisioned token, with which it can join first as the node's installed
// OS, before the machine boots it.
//
// How it is told depends on what the registry can tell apart:
//   - from another address than its join's, the registry contains it, in the transaction
//     that records it, while the workflow that minted the token runs (boot.prepareRamdisk's
//     or metal.ensureRamdisk's ramdisk token; userdata.render's provisioned token, whose
//     deploy awaits the installed OS's rejoin: the run the token records, never another
//     run of the node's guessed for its minter) and, whether or not it runs, while the
//     node's identity epoch is still the one its join got and, for a ramdisk token, which
//     other hosts may read from its boot script, while it lives (its agent holds the node's
//     identity whether or not a workflow runs: a ramdisk's certificate is taken while
//     its workflow runs, and a host that joined first as a deploy's ramdisk may have finished
//     the deploy as its ramdisk and installed OS before the machine's ramdisk came, which
//     then never reaches an installed OS to tell on it; once the epoch moved, its certificate is
//     refused already, and the token presented again moves nothing, so that a host that
//     kept a used token cannot cut each new installed agent off). Containing moves the
//     node's identity epoch (the agent that joined with the token loses its session and
//     its certificate), deletes the node's unused join tokens (the provisioned token a
//     deploy.image carries) and fails, FORBIDDEN, reason token-reused, the workflow that
//     minted the token when it runs; otherwise (a token an operator minted, or one whose
//     workflow ended) the node's running workflow when the move cuts it off (cutOff: it
//     runs at the epoch that moved, so its agents lose their certificates and its unused
//     tokens go, and it could only wait out its steps' timeouts), its error saying that
//     the node's identity was contained, by which token from which address, and what to
//     do. A containment that does not happen (the epoch moved since the join) fails no
//     workflow. The machine's own agent presents it again only from the address of its
//     join (a ramdisk rebooted into the same boot entry, or restarted before it kept its
//     join; bcd join run again after a reboot before the join's unit removed the token
//     file), unless the machine's address changed in between: that machine's agent loses
//     its certificate too, and joins again with a new token.
//   - from another address otherwise, nothing is changed: the epoch moved since its join
//     (the agent its join admitted is refused already), or a ramdisk token whose
//     workflow ended expired.
//   - from the address of its join while the agent that join admitted holds a session,
//     the event says that a machine rebooted faster than its old session ended and a
//     host that took the machine's address look the same here.
//   - from the address of its join after that session ended (or before it opened one),
//     the event says it is the machine's own agent again: a theft from the machine's own
//     address whose agent left looks the same, and is not told as one.
//
// Site tokens, and tokens of a node that is gone, are not told on a node.
func (s *Service) TokenReused(ctx context.Context, tok store.JoinToken, from string) error {
	kind, ok := reusedKinds[tok.Kind]
	if !ok {
		return nil
	}
	presence, err := s.cfg.Joins.Presence(ctx, tok.NodeID, string(kind.role))
	if err != nil {
		return err
	}
	address := tok.ReusedFrom(from)
	var failed string
	var contained bool
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		failed, contained = "", false
		node, err := tx.Node(tok.NodeID)
		if proto.CodeOf(err) == proto.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		e := store.Event{Node: node.ID, Tenant: node.Tenant, Kind: store.EventTokenReused,
			From: orUnknown(tok.UsedFrom), To: orUnknown(from)}
		told := fmt.Sprintf("The %s join token %s of this node was presented again from %s; its join came from %s at %s.",
			tok.Kind, tok.ID, e.To, e.From, tok.UsedAt.Format(time.RFC3339))
		switch {
		case address == store.ReusedFromOtherAddress:
			run, err := mintedBy(tx, node, tok)
			if err != nil {
				return err
			}
			advice := reuseAdvice{tok: tok, node: node.ID, pool: node.Pool}
			if advice.minter, err = minterKind(tx, tok); err != nil {
				return err
			}
			expired := kind.readable && tok.Expired(tx.Now())
			held := kind.heldIdentity && atEpoch(tok.UsedEpoch, tok.UsedAt, node) && !expired
			if run.ID == "" && !held {
				why := "No workflow that minted it runs any more"
				if tok.Workflow == "" {
					why = "No workflow minted it (" + operatorMinted + ")"
				}
				switch {
				case expired:
					why += " and it expired at " + tok.ExpiresAt.Format(time.RFC3339) + " (the machine's own " + kind.agent + " comes with it before then; a host that read it may present it long after)"
				case kind.heldIdentity:
					why += " and the node's identity epoch moved since its join (the certificate it got is refused already)"
				}
				e.Detail = told + kind.mayMean + " " + why + ", so nothing was changed. " + advice.String()
				break
			}
			var cut store.Run
			if run.ID == "" {
				if cut, err = cutOff(tx, node); err != nil {
					return err
				}
			}
			if _, err := updateNode(tx, node.ID, func(n *store.Node) error { n.NewIdentityEpoch(tx.Now()); return nil }); err != nil {
				return err
			}
			deleted, err := tx.DeleteUnusedJoinTokens(node.ID)
			if err != nil {
				return err
			}
			contained, advice.contained = true, true
			failing := ""
			switch {
			case run.ID != "":
				advice.failed = run.Kind
				e.Workflow, e.Error = run.ID, proto.Errorf(proto.Forbidden, "the %s join token of node %s was presented again from %s after its join from %s: another host may have joined as its %s, "+
					"so the node's identity epoch moved and its unused join tokens are deleted; set policy.measuredBoot on pool %s and %s",
					tok.Kind, node.ID, e.To, e.From, kind.agent, node.Pool, RunAgain(run.Kind, node.ID)).WithReason(proto.ReasonTokenReused)
				failing = " and failed workflow " + run.ID
			case cut.ID != "":
				advice.failed = cut.Kind
				e.Workflow, e.Error = cut.ID, proto.Errorf(proto.Forbidden, "node %s's identity was contained: its %s join token %s, which %s, was presented again from %s after its join from %s "+
					"at the identity epoch this %s workflow runs at, so the epoch moved (every certificate of the node's agents is refused, as after nodes revoke-identity) and the node's "+
					"unused join tokens are deleted: the agents this workflow works with were cut off and its join tokens deleted, so it cannot complete. Set policy.measuredBoot on pool %s "+
					"and %s; unless both addresses are this machine's, another host may have joined with the token",
					node.ID, tok.Kind, tok.ID, minter(tok), e.To, e.From, cut.Kind, node.Pool, RunAgain(cut.Kind, node.ID)).WithReason(proto.ReasonTokenReused)
				failing = fmt.Sprintf(" and failed workflow %s (a %s running at that epoch: the move cut off the agents it works with and its join tokens)", cut.ID, cut.Kind)
			}
			if e.Workflow != "" {
				if _, err := s.cfg.Engine.Fail(tx, e.Workflow, e.Error); err != nil {
					return err
				}
				failed = e.Workflow
			}
			e.Detail = told + kind.mayMean + fmt.Sprintf(" The registry moved the node's identity epoch (the %s that joined with the token lost its certificate and its session), "+
				"deleted %d unused join token(s) of the node%s (unless both addresses are this machine's: a machine whose address changed between its two joins looks the same, "+
				"and joins again with a new token). ", kind.agent, deleted, failing) + advice.String()
		case address == store.ReusedFromUnknownAddress:
			e.Detail = told + fmt.Sprintf(" The address of one of the two joins is unknown, so the registry cannot tell this machine's %s started again from another host that read the token: ", kind.agent) +
				"if the machine was not rebooted, revoke the node's agents (nodes revoke-identity) and set the pool's policy.measuredBoot."
		case presence.Live:
			e.Detail = told + fmt.Sprintf(" The %s that join admitted still holds a session: a machine rebooted faster than its old session ended and another host that took the machine's address ", kind.agent) +
				"look the same here, and the registry cannot tell them apart. If the machine was not rebooted, revoke the node's agents (nodes revoke-identity), deploy it again " +
				"and set the pool's policy.measuredBoot."
		default:
			e.Detail = told + fmt.Sprintf(" The session that join opened has ended (or never opened): this machine's %s again, started anew before it kept its join. ", kind.agent) +
				"Nothing to do: a workflow that needs a new join mints a new token."
		}
		_, err = tx.AppendEvent(e)
		return err
	})
	if err != nil || !contained {
		return err
	}
	if failed != "" {
		s.cfg.Engine.Abort(failed)
	}
	s.cfg.Log.Warn("a used join token was presented again from another address: the node's identity epoch moved", "node", tok.NodeID, "kind", tok.Kind,
		"workflow", failed, "from", from, "joinFrom", tok.UsedFrom, "reason", proto.ReasonTokenReused)
	return nil
}

// operatorMinted is who minted a join token that records no workflow.
const operatorMinted = "an operator did, with tokens create, or it was stored before tokens recorded their workflow"

// minter says who minted tok, for a message that names it: "no workflow minted" (and
// who did), or the workflow it records.
func minter(tok store.JoinToken) string {
	if tok.Workflow == "" {
		return "no workflow minted (" + operatorMinted + ")"
	}
	return "workflow " + tok.Workflow + " minted before it ended"
}

// mintedBy is the run that minted the token tok (tok.Workflow: boot.prepareRamdisk,
// metal.ensureRamdisk or userdata.render) while it is node's running, uncancelled
// workflow; zero otherwise. It never guesses from what else runs on the node: a token an
// operator minted (`tokens create`), or one stored before tokens recorded their
// workflow, has none (what its containment does to the node's running workflow is
// cutOff's to say).
func mintedBy(tx *store.Tx, node store.Node, tok store.JoinToken) (store.Run, error) {
	if tok.Workflow == "" || tok.Workflow != node.Workflow {
		return store.Run{}, nil
	}
	return running(tx, node)
}

// minterKind is the kind of the workflow that minted tok (running or not), "" for a
// token no workflow minted (operatorMinted), and unknownMinter when that run is no
// longer stored.
func minterKind(tx *store.Tx, tok store.JoinToken) (string, error) {
	if tok.Workflow == "" {
		return "", nil
	}
	run, err := tx.Run(tok.Workflow)
	if proto.CodeOf(err) == proto.NotFound {
		return unknownMinter, nil
	}
	return run.Kind, err
}

// unknownMinter is reuseAdvice.minter for a token whose workflow is no longer stored.
const unknownMinter = "?"

// reuseAdvice is what to do after a ramdisk or provisioned join token was presented
// again from another address than its join's, for the token's kind, who minted it and
// the workflow the registry failed (or none): the end of the token.reused event's
// detail.
type reuseAdvice struct {
	tok        store.JoinToken
	node, pool string
	// minter is the kind of the workflow that minted the token (minterKind).
	minter string
	// failed is the kind of the workflow the containment failed; "" for none.
	failed string
	// contained is whether the registry moved the node's identity epoch.
	contained bool
}

// String is the advice, as sentences.
func (a reuseAdvice) String() string {
	var do []string
	if !a.contained && a.tok.Kind == store.TokenRamdisk {
		// The certificate of the ramdisk that joined first holds while its workflow runs
		// (a rescue's until the node's next workflow begins).
		do = append(do, fmt.Sprintf("unless both addresses are this machine's, revoke the node's agents (`nodes revoke-identity %s`): the ramdisk that joined with the token still holds its certificate", a.node))
	}
	deployMinted := a.minter == string(Deploy) || a.minter == unknownMinter
	switch {
	case a.failed != "":
		do = append(do, RunAgain(a.failed, a.node))
	case !a.contained:
	case deployMinted:
		do = append(do, fmt.Sprintf("redeploy the node (`nodes release %s`, then `nodes deploy %s --profile P`): the installation's user data, which carried the token, may have reached another host, "+
			"and the machine's installed OS lost its certificate", a.node, a.node))
	case a.tok.Workflow == "":
		do = append(do, fmt.Sprintf("join the machine's installed OS again with a token minted now (`tokens create --kind %s --node-id %s`, then `bcd join` on the machine), "+
			"keeping it where no other host reads it", store.TokenProvisioned, a.node))
	}
	if deployMinted {
		do = append(do, "check the installed agent of any machine that got the deploy.image of the workflow that minted the token")
	}
	do = append(do, fmt.Sprintf("set policy.measuredBoot on pool %s, so that a host that holds a token cannot pass for the machine", a.pool))
	return "What to do: " + strings.Join(do, "; ") + "."
}

// RunAgain says what works, once the machine is trusted again, after a move of node's
// identity epoch (a containment, TokenReused, or a revocation, RevokeAgents) failed its
// workflow of kind, which ran at the epoch that moved (cutOff): the move refused every
// certificate of the node's agents, the installed OS's too, and deleted its unused join
// tokens. A workflow that boots the ramdisk (inspect, commission, release, retire,
// rescue) or installs the OS anew (deploy) mints the tokens its agents join with, and an
// enrollment reaches only the BMC, so `nodes retry` runs it again; one that works with the installed OS (remediate, or
// unrescue, which boots it) waits for an agent that holds no certificate the registry
// takes, so the installed OS joins again with a new provisioned token first (or as it
// boots), or a redeploy installs it anew. kind "" (a revocation stored before it recorded
// the kind) says both.
func RunAgain(kind, node string) string {
	retry := fmt.Sprintf("`nodes retry %s`", node)
	mint := fmt.Sprintf("`tokens create --kind provisioned --node-id %s`", node)
	redeploy := fmt.Sprintf("or redeploy the node (`nodes release %s`, then `nodes deploy %s --profile P`)", node, node)
	noCert := "it holds no certificate the registry takes"
	switch Request(kind) {
	case Deploy:
		return fmt.Sprintf("deploy the node again (%s): it installs the OS anew, with a new token in its user data", retry)
	case Remediate:
		return fmt.Sprintf("join the installed OS again first, as %s (%s, then `bcd join` on the machine), then run the remediate workflow again (%s), which works with it; %s",
			noCert, mint, retry, redeploy)
	case Unrescue:
		return fmt.Sprintf("mint the installed OS a token, as %s (%s), run the unrescue workflow again (%s) and, once the installed OS boots, join it with the token (`bcd join` on the machine): "+
			"the workflow waits for that join; %s", noCert, mint, retry, redeploy)
	case Rescue:
		return fmt.Sprintf("run the rescue workflow again (%s): it boots the ramdisk with a new token; the installed OS holds no certificate the registry takes either: "+
			"mint it a token (%s) and join it with that token (`bcd join` on the machine) once unrescue boots it", retry, mint)
	case Inspect, Commission, Release, Retire:
		return fmt.Sprintf("run the %s workflow again (%s): it boots the ramdisk with a new token", kind, retry)
	case "":
		return fmt.Sprintf("run it again (%s), unless it works with the installed OS (a remediation, an unrescue), which holds no certificate the registry takes: "+
			"join the installed OS again first (%s, then `bcd join` on the machine), %s", retry, mint, redeploy)
	}
	return fmt.Sprintf("run the %s workflow again (%s)", kind, retry)
}

// cutOff is node's running, uncancelled workflow when it runs at the node's identity
// epoch, which a containment (TokenReused) or a revocation (RevokeAgents) is about to
// move (zero when none does): one whose recorded epoch is the node's (runsAt). A reinstall
// (deploy, release, retire) moved it itself as it was created; any other (inspect,
// commission, rescue, unrescue, a remediation) found it. Either way the join tokens it
// mints and the agents it boots or finds (its ramdisk, the installed OS it restarts)
// hold that epoch, before or after it reached a ramdisk: the move refuses their
// certificates and deletes its unused tokens, so it cannot complete, and the mover fails
// it. A workflow of a pool whose machines run no agent (policy.agent none) is never cut
// off: only out-of-band steps reach its machine, and it mints no join token. As every
// move fails the workflow it cuts off, one still running that was created before the
// epoch last moved is such a workflow, or one a registry of an earlier version left
// running through a revocation: that move took its agents and tokens of before, which
// the next does not repeat.
func cutOff(tx *store.Tx, node store.Node) (store.Run, error) {
	run, err := running(tx, node)
	if err != nil || run.ID == "" || !runsAt(run, node) {
		return store.Run{}, err
	}
	pool, err := tx.Pool(node.Tenant, node.Pool)
	if err != nil || pool.Policy.Agent == store.AgentNone {
		return store.Run{}, err
	}
	return run, nil
}

// runsAt reports whether run runs at node's identity epoch: the epoch the run recorded
// as it was created is the node's (atEpoch).
func runsAt(run store.Run, node store.Node) bool {
	return atEpoch(run.IdentityEpoch, run.CreatedAt, node)
}

// atEpoch reports whether node's identity epoch is still the one a record (a run's
// creation, a token's join) was made at: epoch, the one it recorded, is the node's. The
// epoch is a logical clock, kept in the store's transactions: the time of the record
// and the time of the epoch's last move may come from the clocks of two replicas, and a
// skew between them would miss a record made just after the move (or take one made
// before it). A record stored before it recorded its epoch (nil) was made at it when it
// was made, at, since the epoch last moved.
func atEpoch(epoch *int64, at time.Time, node store.Node) bool {
	if epoch == nil {
		return !node.IdentityEpochAt.After(at)
	}
	return *epoch == node.IdentityEpoch
}

// running is node's running, uncancelled workflow; zero when none runs.
func running(tx *store.Tx, node store.Node) (store.Run, error) {
	ok, err := workflowRunning(tx, node)
	if err != nil || !ok {
		return store.Run{}, err
	}
	run, err := tx.Run(node.Workflow)
	if err != nil || run.Cancelled != nil {
		return store.Run{}, err
	}
	return run, nil
}

// orUnknown is an address, or "unknown" for none.
func orUnknown(addr string) string {
	if addr == "" {
		return "unknown"
	}
	return addr
}
