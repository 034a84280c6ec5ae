package registry

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/join"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/site"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/userdata"
	"github.com/better-compute/better-compute/registry/workflow"
)

// agentPlane connects the agent endpoint with the rooms that use it: the workflow
// engine's relays and joins, metal's generations, images, user data and ramdisk boots,
// the site agents' service, and the tenants' secrets node agents ask for.
type agentPlane struct {
	st       *store.Store
	ep       *agents.Endpoint
	joins    *workflow.JoinLog
	engine   *workflow.Engine
	userData *userdata.Renderer
	secrets  *secret.Box
	keys     *pki.PKI
	// holder is this run of the registry, recorded with the sessions it holds.
	holder store.Holder
	// registryURL is the base URL ramdisks join at.
	registryURL string
	log         *slog.Logger
	// sites keeps the site agents' NodeSpecs and records their discoveries and cache
	// reports.
	sites *site.Service
}

// Relay is workflow.Relay over the endpoint: a site step goes to the site agent of the
// node's site (site.Command); a ramdisk or node step goes to the machine's own agent of
// that role, never to its other one. The command id passes through, so a resend
// dedupes. A site command names the machine's tenant, whose share of the site agent's
// command slots it counts against (proto.TenantCommandShare), and its step's timeout,
// which the site runs it for at most. What the step keeps beside the command is stored
// with it and never sent (agents.Endpoint.RelayKept). A site command stored already
// under the id with the same input (a step resumed after the registry restarted) is
// relayed as stored, with the driver bindings it was made with, even when the node's
// have changed since: the site agent may be running it already (storedSiteCommand).
func (p *agentPlane) Relay(ctx context.Context, target workflow.RelayTarget, commandID, kind string, in workflow.CommandInput) (json.RawMessage, error) {
	role, cmd := proto.Role(target.Role), proto.Command{ID: commandID, Kind: kind, Payload: in.Payload}
	if target.Role == profile.Site {
		err := p.st.View(func(tx *store.Tx) (err error) {
			stored, ok, err := storedSiteCommand(tx, relayAgent(target), commandID, kind, in.Payload)
			if err != nil || ok {
				cmd.Payload, cmd.Tenant = stored.Payload, stored.Tenant
				return err
			}
			cmd.Payload, cmd.Tenant, err = site.Command(tx, target.NodeID, target.Run, target.Step, kind, in.Payload)
			return err
		})
		if err != nil {
			return nil, err
		}
		cmd.TimeoutSeconds = target.TimeoutSeconds
	}
	return p.ep.RelayKept(ctx, relayAgent(target), role, cmd, in.Kept)
}

// Stored is workflow.Relay's Stored: the command commandID as the store holds it for
// target's agent, a site command's input taken out of its envelope (proto.SiteCommand);
// INVALID_STATE for one whose answer its run recorded (store.AgentCommand.Spent).
func (p *agentPlane) Stored(_ context.Context, target workflow.RelayTarget, commandID string) (workflow.CommandInput, bool, error) {
	var c store.AgentCommand
	err := p.st.View(func(tx *store.Tx) (err error) { c, err = tx.AgentCommand(relayAgent(target), commandID); return err })
	switch {
	case proto.CodeOf(err) == proto.NotFound:
		return workflow.CommandInput{}, false, nil
	case err != nil:
		return workflow.CommandInput{}, false, err
	}
	if err := c.Spent(); err != nil {
		return workflow.CommandInput{}, false, err
	}
	in := workflow.CommandInput{Payload: c.Payload, Kept: c.Kept}
	if target.Role == profile.Site {
		if in.Payload, err = siteInput(c); err != nil {
			return workflow.CommandInput{}, false, err
		}
	}
	return in, true, nil
}

// Recorded is workflow.Relay's Recorded: the answered commands of attempt for node's
// agents (its own, under its id, and its site's) keep only their digests, in tx
// (store.Tx.RecordAgentCommands).
func (p *agentPlane) Recorded(tx *store.Tx, node store.Node, attempt, run, step string) error {
	for _, agent := range p.Agents(node) {
		if _, err := tx.RecordAgentCommands(agent, attempt, run, step); err != nil {
			return err
		}
	}
	return nil
}

// Agents is workflow.Relay's Agents: node's own agent, and its site's (relayAgent).
func (p *agentPlane) Agents(node store.Node) []string {
	agents := []string{node.ID}
	if node.Site != "" {
		agents = append(agents, site.Agent(node.Site))
	}
	return agents
}

// storedSiteCommand is the site command id of kind stored for agent whose input
// (proto.SiteCommand.Input) is input, as stored; ok is false when none is. Its envelope
// is what the command was made with: the node's driver bindings then, which a command
// made now would replace with the node's current ones, and its store refuse as CONFLICT
// while it is pending.
func storedSiteCommand(tx *store.Tx, agent, id, kind string, input json.RawMessage) (c store.AgentCommand, ok bool, err error) {
	c, err = tx.AgentCommand(agent, id)
	switch {
	case proto.CodeOf(err) == proto.NotFound:
		return c, false, nil
	case err != nil:
		return c, false, err
	case c.Kind != kind:
		return c, false, nil
	}
	if err := c.Spent(); err != nil {
		return c, false, err
	}
	stored, err := siteInput(c)
	return c, err == nil && sameJSON(stored, input), err
}

// siteInput is the input of the stored site command c, taken out of its envelope
// (proto.SiteCommand).
func siteInput(c store.AgentCommand) (json.RawMessage, error) {
	var env proto.SiteCommand
	if err := json.Unmarshal(c.Payload, &env); err != nil {
		return nil, proto.Errorf(proto.Internal, "stored site command %s does not decode: %v", c.ID, err)
	}
	return env.Input, nil
}

// sameJSON reports whether a and b are the same JSON text but for insignificant space
// (the store compacts what it keeps); either empty is the same as null.
func sameJSON(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	if len(a) == 0 {
		a = json.RawMessage("null")
	}
	if len(b) == 0 {
		b = json.RawMessage("null")
	}
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

// relayAgent is the agent a command for target goes to: the site agent of its site, or
// the machine's own.
func relayAgent(target workflow.RelayTarget) string {
	if target.Role == profile.Site {
		return site.Agent(target.SiteID)
	}
	return target.NodeID
}

// NodeAgentConnected is metal.Presence: whether node's installed OS agent has a session
// here, or, as the joins in tx say, with another replica.
func (p *agentPlane) NodeAgentConnected(tx *store.Tx, node string) bool {
	if p.ep.Connected(node, proto.RoleNode) {
		return true
	}
	elsewhere, err := p.joins.ConnectedElsewhere(tx, node, string(proto.RoleNode))
	if err != nil {
		p.log.Warn("reading whether a node agent holds a session with another replica", "node", node, "err", err)
	}
	return elsewhere != ""
}

// elsewhere is the endpoint's Elsewhere: the other replica holding a session of node's
// agent in role, as tx reads the store, "" when none does: for a machine's agent, as
// its joins say (JoinLog.ConnectedElsewhere); for a site agent, as its session's record
// says (store.AgentSession, recorded by session).
func (p *agentPlane) elsewhere(tx *store.Tx, node string, role proto.Role) (string, error) {
	if role != proto.RoleSite {
		return p.joins.ConnectedElsewhere(tx, node, string(role))
	}
	s, ok, err := tx.AgentSession(node)
	if err != nil || !ok || s.Replica == p.holder.Replica {
		return "", err
	}
	if live, err := s.Live(tx); !live {
		return "", err
	}
	return s.Replica, nil
}

// expand completes a command as it is delivered: for a site agent, its media.insert
// (site.ExpandMediaInsert) and BMC credential (site.ExpandBMC); for every agent, the
// source and image sources of a deploy.image as the node's site and pool allow them now
// (metal.DeliverDeployImage) and its user data (userdata.Renderer.Deliver).
func (p *agentPlane) expand(node string, role proto.Role, cmd proto.Command) (proto.Command, error) {
	err := p.st.View(func(tx *store.Tx) (err error) {
		if role == proto.RoleSite {
			if cmd, err = site.ExpandMediaInsert(tx, cmd, nil); err != nil {
				return err
			}
			if cmd, err = site.ExpandBMC(tx, p.secrets, node, cmd); err != nil {
				return err
			}
		}
		if cmd, err = metal.DeliverDeployImage(tx, node, cmd); err != nil {
			return err
		}
		cmd, err = p.userData.Deliver(tx, node, role, cmd)
		return err
	})
	return cmd, err
}

// secret is the endpoint's Secret: a tenant's secret for the node agent whose NodeSpec
// names it (secret.Box.ForAgent has the rule).
func (p *agentPlane) secret(node string, role proto.Role, ref string) (value []byte, err error) {
	err = p.st.View(func(tx *store.Tx) (err error) { value, err = p.secrets.ForAgent(tx, node, role, ref); return err })
	return value, err
}

// renew is the endpoint's Renew: a certificate for the agent's new key (join.Renew).
func (p *agentPlane) renew(c proto.AgentCredential, publicKey []byte) ([]byte, error) {
	return join.Renew(p.st, p.keys, c, publicKey)
}

// current is attest.Verifier's Current: a certificate naming c is of the machine's
// current installation and, for a ramdisk, of a workflow that runs (store.Tx.CheckAgent).
func (p *agentPlane) current(c proto.AgentCredential) error {
	return p.st.View(func(tx *store.Tx) error { return tx.CheckAgent(c) })
}

// session records an agent's session (workflow.JoinLog.Session): its error ends the
// session, so that the agent's next hello is recorded again (agents.Config.OnSession).
func (p *agentPlane) session(node string, role proto.Role, opened time.Time, bootID string) error {
	return p.joins.Session(node, string(role), opened, bootID)
}

// sessionEnded records that an agent's session here ended (workflow.JoinLog.SessionEnded).
func (p *agentPlane) sessionEnded(node string, role proto.Role, opened, at time.Time) {
	if err := p.joins.SessionEnded(node, string(role), opened, at); err != nil {
		p.log.Error("recording the end of an agent session", "node", node, "role", role, "err", err)
	}
}

// stopping records, as the endpoint stops, when it asks its agents to come back by
// (workflow.JoinLog.Stopping): a workflow waits for their return until then.
func (p *agentPlane) stopping(returnIn, spread time.Duration) {
	if err := p.joins.Stopping(returnIn, spread); err != nil {
		p.log.Error("recording when the agents were asked to come back: a workflow may take one that returns late for gone", "err", err)
	}
}

// progress hands a command's progress to the workflow step that sent it, when the
// command is one relayed to the reporting agent and not answered yet. The endpoint tells
// only the progress of the command on its own stream; this holds on its own, so that no
// agent's report reaches a step of another's node whatever the endpoint passes on.
func (p *agentPlane) progress(node, commandID string, detail json.RawMessage) {
	var c store.AgentCommand
	err := p.st.View(func(tx *store.Tx) (err error) { c, err = tx.AgentCommand(node, commandID); return err })
	if err != nil || c.Done {
		p.log.Warn("progress of a command not relayed to the agent, or answered already, dropped", "node", node, "command", commandID, "err", err)
		return
	}
	if err := p.engine.ReportProgress(commandID, c.Payload, detail); err != nil && proto.CodeOf(err) != proto.NotFound {
		p.log.Warn("recording progress", "node", node, "command", commandID, "err", err)
	}
}

// Prepare is metal.RamdiskBoots: a ramdisk token for node, minted in tx by the workflow
// run, and where and whom the ramdisk joins.
func (p *agentPlane) Prepare(tx *store.Tx, node store.Node, run string) (proto.PrepareRamdisk, error) {
	_, bearer, err := join.MintToken(tx, store.TokenFor{Kind: store.TokenRamdisk, NodeID: node.ID, Site: node.Site, Workflow: run}, 0)
	pins := p.keys.Pins()
	return proto.PrepareRamdisk{
		MACs: node.MACs, ProductUUID: node.ProductUUID, Token: bearer, Registry: p.registryURL,
		Pins: []string{pins.ServingCA, pins.JoinSigning, pins.JoinEncryption},
		Args: []string{"bc.node=" + node.ID},
	}, err
}

// Joinable is metal.RamdiskBoots' Joinable: nil for a token a ramdisk can join with or
// did (store.Tx.JoinTokenOf); one gone (revoked with its node's identity, pruned) or
// expired unused fails the step that made the boot entry with it.
func (p *agentPlane) Joinable(_ context.Context, token string) error {
	return p.st.View(func(tx *store.Tx) error {
		tok, err := tx.JoinTokenOf(token)
		switch {
		case proto.CodeOf(err) == proto.Unauthenticated:
			return proto.Errorf(proto.InvalidState, "the ramdisk join token of the machine's boot entry is gone (revoked with the node's identity, or pruned): no ramdisk can join with it; the step's next try mints a new one").WithReason(proto.ReasonTokenInvalid)
		case err != nil:
			return err
		case tok.UsedAt.IsZero() && tok.Expired(tx.Now()):
			return proto.Errorf(proto.InvalidState, "the ramdisk join token %s of the machine's boot entry expired unused at %s, before the step was answered: no ramdisk can join with it; the step's next try mints a new one (give the step retries, or retry the node)",
				tok.ID, tok.ExpiresAt.Format(time.RFC3339)).WithReason(proto.ReasonTokenExpired)
		}
		return nil
	})
}

// catalog is metal.Images over the store's catalog; capKey signs the capabilities of its
// cache URLs.
type catalog struct {
	st     *store.Store
	capKey ed25519.PrivateKey
}

func (c catalog) Resolve(_ context.Context, tenant, ref string) (metal.Image, error) {
	var img store.Image
	err := c.st.View(func(tx *store.Tx) (err error) { img, err = image.ResolveImage(tx, tenant, ref); return err })
	return metal.Image{ID: img.ID, Tenant: img.Tenant, Ref: img.Ref, Kind: string(img.Kind), Format: string(img.Format),
		Compression: string(img.Compression), SHA256: img.SHA256, SizeBytes: img.SizeBytes, Source: img.Source}, err
}

// VerifyForUse re-reads the image's catalog row and verifies it, so a row changed
// since Resolve is what is checked.
func (c catalog) VerifyForUse(_ context.Context, tenant string, img metal.Image, allowUnsigned bool) error {
	return c.st.View(func(tx *store.Tx) error {
		row, err := tx.Image(img.ID)
		if err != nil {
			return err
		}
		if row.SHA256 != img.SHA256 || row.Source != img.Source {
			return proto.Errorf(proto.InvalidState, "image %s changed while it was being deployed", img.Ref).WithReason(proto.ReasonSignature)
		}
		return image.VerifyImageForUse(tx, tenant, row, image.UseOptions{AllowUnsigned: allowUnsigned})
	})
}

// CacheURL is the image at the site's cache when the site holds it ready
// (site.CacheURL), with a capability that expires at until unless until is zero.
func (c catalog) CacheURL(_ context.Context, siteID string, img metal.Image, until time.Time) (url string, err error) {
	err = c.st.View(func(tx *store.Tx) (err error) { url, err = site.CacheURL(tx, siteID, img.ID, img.SHA256); return err })
	if url != "" && !until.IsZero() {
		url = proto.CacheCapURL(url, c.capKey, img.SHA256, until)
	}
	return url, err
}

// renderer is metal.UserData over the user-data renderer.
type renderer struct {
	r *userdata.Renderer
}

func (r renderer) Render(tx *store.Tx, node store.Node, run string, p *profile.Profile) (proto.UserDataRendered, error) {
	ud, ok := p.UserData()
	if !ok {
		return proto.UserDataRendered{}, proto.Errorf(proto.InvalidConfig, "profile %s has no userData to render", p.ID())
	}
	return r.r.Render(tx, ud, userdata.Node{ID: node.ID, Site: node.Site, Workflow: run})
}

// startAgentPlane starts the agent endpoint on cfg.AgentListen with the registry's
// serving certificate, trusting the agent CA, and the workflow engine whose relays and
// joins go through it. holder names this run of the registry among those sharing its
// store: the workflows it drives are claimed in its replica's name, the sessions it
// holds recorded as its.
func startAgentPlane(cfg Config, st *store.Store, k keys, cert *servingCertificate, ud *userdata.Renderer, registryURL string, holder store.Holder, obs workflow.Observer) (*agentPlane, error) {
	p := &agentPlane{st: st, joins: workflow.NewJoinLog(st, holder), holder: holder, userData: ud, secrets: k.box, keys: k.pki, registryURL: registryURL,
		log: cfg.Log, sites: site.New(site.Config{Store: st, Clock: cfg.Clock, Log: cfg.Log,
			CacheKey: proto.EncodeCacheKey(k.box.CacheCapabilityKey().Public().(ed25519.PublicKey))})}
	if cfg.UserData.ControlPlaneURL != "" {
		p.registryURL = cfg.UserData.ControlPlaneURL
	}
	p.engine = workflow.New(workflow.Config{Store: st, Joins: p.joins, Relay: p, Clock: cfg.Clock, Observer: obs, Log: cfg.Log,
		Claims: &workflow.Claims{Owner: holder.Replica, Started: holder.Started}})
	// Replicas sharing an etcd store each keep their own return plan, and end the
	// sessions of agents whose newer session another replica holds; a registry alone on
	// its bbolt store keeps the store's plan, and every session recorded there is its own.
	var replica string
	var elsewhere func(*store.Tx, string, proto.Role) (string, error)
	if cfg.Store.Backend == "etcd" {
		replica, elsewhere = holder.Replica, p.elsewhere
	}
	ep, err := agents.Start(agents.Config{
		Replica: replica, Holder: holder, Elsewhere: elsewhere, Listen: cfg.AgentListen, GetCertificate: cert.get, AgentCAs: k.pki.AgentCAPool(), Store: st, Log: cfg.Log, Keys: k.endpoint,
		OnInventory: p.sites.Inventory, OnSession: p.session, OnSessionEnd: p.sessionEnded, OnStop: p.stopping, OnProgress: p.progress, Expand: p.expand,
		Secret: p.secret, Renew: p.renew, Now: cfg.Clock.Now, Received: attest.Verifier{AgentCAs: k.pki.AgentCAPool(), Current: p.current}.Received,
	})
	p.ep = ep
	return p, err
}
