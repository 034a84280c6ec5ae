package registry

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"

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
// the image locations the site caches report, and the tenants' secrets node agents ask
// for.
type agentPlane struct {
	st       *store.Store
	ep       *agents.Endpoint
	joins    *workflow.JoinLog
	engine   *workflow.Engine
	userData *userdata.Renderer
	secrets  *secret.Box
	keys     *pki.PKI
	// registryURL is the base URL ramdisks join at.
	registryURL string
	log         *slog.Logger

	mu       sync.Mutex
	observed chan struct{} // closed and replaced whenever an agent applies a generation

	// reported holds the site agents whose cache report changed and is not recorded in
	// the image locations yet; reportedSignal wakes recordInventory.
	reportedMu     sync.Mutex
	reported       map[string]bool
	reportedSignal chan struct{}
	// sites keeps the site agents' NodeSpecs and records their discoveries.
	sites *site.Service
}

// siteAgent is the node id of the site agent of site: a site agent joins with a site
// token, whose node id is the site's name (docs/join.md).
func siteAgent(site string) string { return site }

// Relay is workflow.Relay over the endpoint: a site step goes to the site agent as a
// SiteCommand naming the machine and its driver bindings (metal.CommandDrivers: the
// run's profile's over the node's for the step's own operation); a ramdisk or node step goes
// to the machine's own agent. The command id passes through, so a resend dedupes.
func (p *agentPlane) Relay(ctx context.Context, target workflow.RelayTarget, commandID, kind string, input json.RawMessage) (json.RawMessage, error) {
	agent, payload := target.NodeID, input
	if target.Role == profile.Site {
		var node store.Node
		var run store.Run
		err := p.st.View(func(tx *store.Tx) (err error) {
			if node, err = tx.Node(target.NodeID); err != nil || target.Run == "" {
				return err
			}
			run, err = tx.Run(target.Run)
			return err
		})
		if err != nil {
			return nil, err
		}
		drivers, err := metal.CommandDrivers(node, run, target.Step, kind)
		if err != nil {
			return nil, err
		}
		if payload, err = json.Marshal(proto.SiteCommand{Node: node.ID, Drivers: drivers, Input: input}); err != nil {
			return nil, err
		}
		agent = siteAgent(target.SiteID)
	}
	return p.ep.Relay(ctx, agent, proto.Command{ID: commandID, Kind: kind, Payload: payload})
}

// NodeAgentConnected is metal.Presence: whether node's installed OS agent has a session.
func (p *agentPlane) NodeAgentConnected(node string) bool {
	return p.ep.Connected(node, proto.RoleNode)
}

// expand completes a command as it is delivered: a site's media.insert gets its image
// resolved (site.ExpandMediaInsert), and a site command that reaches a BMC the BMC's
// credential, for the agent of the node's site and the address it was bound with
// (site.ExpandBMC); a deploy.image the user data it names, opened for the ramdisk of the
// node it was rendered for and no other agent. Neither the credential nor the document is
// ever stored with the command.
func (p *agentPlane) expand(node string, role proto.Role, cmd proto.Command) (proto.Command, error) {
	if role == proto.RoleSite {
		err := p.st.View(func(tx *store.Tx) (err error) {
			if cmd, err = site.ExpandMediaInsert(tx, cmd, nil); err != nil {
				return err
			}
			cmd, err = site.ExpandBMC(tx, p.secrets, node, cmd)
			return err
		})
		if err != nil {
			return cmd, err
		}
	}
	if cmd.Kind != proto.CommandDeployImage {
		return cmd, nil
	}
	var in proto.DeployImage
	if err := json.Unmarshal(cmd.Payload, &in); err != nil {
		return cmd, proto.Errorf(proto.Internal, "deploy.image payload: %v", err)
	}
	if in.UserDataRef == "" {
		return cmd, nil
	}
	err := p.st.View(func(tx *store.Tx) error {
		doc, err := p.userData.Fetch(tx, in.UserDataRef, node, string(role))
		in.UserData = doc.Data
		return err
	})
	if err != nil {
		return cmd, err
	}
	payload, err := json.Marshal(in)
	cmd.Payload = payload
	return cmd, err
}

// secret is the endpoint's Secret: a tenant's secret for the node agent whose NodeSpec
// names it (secret.Box.ForAgent has the rule).
func (p *agentPlane) secret(node string, role proto.Role, ref string) (value []byte, err error) {
	err = p.st.View(func(tx *store.Tx) (err error) { value, err = p.secrets.ForAgent(tx, node, role, ref); return err })
	return value, err
}

// renew is the endpoint's Renew: a certificate for the agent's new key (join.Renew).
func (p *agentPlane) renew(node string, role proto.Role, publicKey []byte) ([]byte, error) {
	return join.Renew(p.st, p.keys, node, string(role), publicKey)
}

// session records an agent's session as a join of its role: a rejoin after a plain
// reboot reconnects without join.join and must count.
func (p *agentPlane) session(node string, role proto.Role) {
	if role == proto.RoleSite {
		return
	}
	if err := p.joins.Joined(node, string(role)); err != nil {
		p.log.Error("recording an agent session", "node", node, "role", role, "err", err)
	}
}

// progress hands a command's progress to the workflow step that sent it.
func (p *agentPlane) progress(node, commandID string, detail json.RawMessage) {
	if err := p.engine.ReportProgress(commandID, detail); err != nil && proto.CodeOf(err) != proto.NotFound {
		p.log.Warn("recording progress", "node", node, "command", commandID, "err", err)
	}
}

// observe wakes whoever waits for an agent's generation.
func (p *agentPlane) observe(string, int64) {
	p.mu.Lock()
	close(p.observed)
	p.observed = make(chan struct{})
	p.mu.Unlock()
}

// WaitObserved is metal.Generations: it returns once node's agent has applied a
// generation at least its desired one; a node without a NodeSpec has nothing to apply.
func (p *agentPlane) WaitObserved(ctx context.Context, node string) error {
	for {
		p.mu.Lock()
		changed := p.observed
		p.mu.Unlock()
		var done bool
		err := p.st.View(func(tx *store.Tx) error {
			spec, err := tx.NodeSpec(node)
			if proto.CodeOf(err) == proto.NotFound {
				done = true
				return nil
			}
			if err != nil {
				return err
			}
			st, err := tx.AgentStatus(node)
			if proto.CodeOf(err) == proto.NotFound {
				return nil
			}
			done = err == nil && st.ObservedGeneration >= spec.Generation
			return err
		})
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// reportInventory hands a changed section to the site service and notes a site agent
// whose cache report changed; the endpoint's hook must not block, so recordInventory
// does the work.
func (p *agentPlane) reportInventory(node, section string, data json.RawMessage) {
	p.sites.Inventory(node, section, data)
	if section != cacheSection {
		return
	}
	p.reportedMu.Lock()
	p.reported[node] = true
	p.reportedMu.Unlock()
	select {
	case p.reportedSignal <- struct{}{}:
	default:
	}
}

// cacheSection is the inventory section a site cache reports its images in.
const cacheSection = "images"

// recordInventory keeps the image locations in line with the site caches' latest
// reports, read from the store, until ctx ends.
func (p *agentPlane) recordInventory(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.reportedSignal:
		}
		p.reportedMu.Lock()
		nodes := p.reported
		p.reported = map[string]bool{}
		p.reportedMu.Unlock()
		for node := range nodes {
			if err := p.st.Update(func(tx *store.Tx) error { return recordCacheReport(tx, node) }); err != nil {
				p.log.Warn("site cache report", "node", node, "err", err)
			}
		}
	}
}

// recordCacheReport records the site agent's stored `images` section as its site's
// cache report.
func recordCacheReport(tx *store.Tx, node string) error {
	site, err := tx.Site(node)
	if err != nil {
		return err
	}
	inv, err := tx.Inventory(node)
	if err != nil {
		return err
	}
	for _, s := range inv {
		if s.Section != cacheSection {
			continue
		}
		var entries []proto.ImageCacheEntry
		if err := json.Unmarshal(s.Data, &entries); err != nil {
			return proto.Errorf(proto.InvalidInput, "the images section does not decode: %v", err)
		}
		_, err = image.RecordSiteCacheReport(tx, site.ID, node, entries)
		return err
	}
	return nil
}

// Prepare is metal.RamdiskBoots: a ramdisk token for node, and where and whom the
// ramdisk joins.
func (p *agentPlane) Prepare(_ context.Context, node store.Node) (proto.PrepareRamdisk, error) {
	var bearer string
	err := p.st.Update(func(tx *store.Tx) (err error) {
		_, bearer, err = join.MintToken(tx, store.TokenRamdisk, node.ID, node.Site, 0)
		return err
	})
	pins := p.keys.Pins()
	return proto.PrepareRamdisk{
		MACs: node.MACs, ProductUUID: node.ProductUUID, Token: bearer, Registry: p.registryURL,
		Pins: []string{pins.ServingCA, pins.JoinSigning, pins.JoinEncryption},
		Args: []string{"bc.node=" + node.ID},
	}, err
}

// catalog is metal.Images over the store's catalog.
type catalog struct{ st *store.Store }

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

// CacheURL is the image at the site's cache when the site holds it ready: the site
// agent's httpBase (its `site` inventory section) + /images/sha256/<digest>.
func (c catalog) CacheURL(_ context.Context, site string, img metal.Image) (string, error) {
	var url string
	err := c.st.View(func(tx *store.Tx) error {
		loc, err := tx.ImageLocation(site, img.ID)
		if proto.CodeOf(err) == proto.NotFound || (err == nil && loc.State != proto.CacheReady) {
			return nil
		}
		if err != nil {
			return err
		}
		inv, err := tx.Inventory(siteAgent(site))
		if err != nil {
			return err
		}
		for _, s := range inv {
			var si proto.SiteInventory
			if s.Section == proto.SectionSite && json.Unmarshal(s.Data, &si) == nil && si.HTTPBase != "" {
				url = strings.TrimSuffix(si.HTTPBase, "/") + "/images/sha256/" + img.SHA256
			}
		}
		return nil
	})
	return url, err
}

// renderer is metal.UserData over the user-data renderer.
type renderer struct {
	st *store.Store
	r  *userdata.Renderer
}

func (r renderer) Render(_ context.Context, node store.Node, p *profile.Profile) (metal.UserDataResult, error) {
	ud, ok := p.UserData()
	if !ok {
		return metal.UserDataResult{}, proto.Errorf(proto.InvalidConfig, "profile %s has no userData to render", p.ID())
	}
	var out userdata.Rendered
	err := r.st.Update(func(tx *store.Tx) (err error) {
		out, err = r.r.Render(tx, ud, userdata.Node{ID: node.ID, Site: node.Site})
		return err
	})
	return metal.UserDataResult{UserDataRef: out.UserDataRef, Kind: out.Kind, JoinTokenID: out.JoinTokenID}, err
}

// startAgentPlane starts the agent endpoint on cfg.AgentListen with the registry's
// serving certificate, trusting the agent CA, and the workflow engine whose relays and
// joins go through it.
func startAgentPlane(cfg Config, st *store.Store, keys *pki.PKI, cert *servingCertificate, ud *userdata.Renderer, box *secret.Box, registryURL string) (*agentPlane, error) {
	p := &agentPlane{st: st, joins: workflow.NewJoinLog(st), userData: ud, secrets: box, keys: keys, registryURL: registryURL,
		log: cfg.Log, observed: make(chan struct{}), reported: map[string]bool{}, reportedSignal: make(chan struct{}, 1),
		sites: site.New(site.Config{Store: st, Log: cfg.Log})}
	if cfg.UserData.ControlPlaneURL != "" {
		p.registryURL = cfg.UserData.ControlPlaneURL
	}
	p.engine = workflow.New(workflow.Config{Store: st, Joins: p.joins, Relay: p, Log: cfg.Log})
	ep, err := agents.Start(agents.Config{
		Listen: cfg.AgentListen, GetCertificate: cert.get, AgentCAs: keys.AgentCAPool(), Store: st, Log: cfg.Log,
		OnInventory: p.reportInventory, OnObserved: p.observe, OnSession: p.session, OnProgress: p.progress, Expand: p.expand,
		Secret: p.secret, Renew: p.renew, Received: attest.Verifier{AgentCAs: keys.AgentCAPool()}.Received,
	})
	p.ep = ep
	return p, err
}
