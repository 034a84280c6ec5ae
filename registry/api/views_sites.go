package api

import (
	"encoding/json"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/site"
	"github.com/better-compute/better-compute/registry/store"
)

// Site is a site as the API shows it.
type Site struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
	// BMCNetworks are the CIDRs the BMC addresses of the site's nodes must be in.
	BMCNetworks []string `json:"bmcNetworks,omitempty"`
	// ImageSources are the host patterns the site's caches may pull images from.
	ImageSources []string `json:"imageSources,omitempty"`
	// Agent is whether the site's agent is connected (sites.list).
	Agent *SiteAgent `json:"agent,omitempty"`
	// IdentityEpoch counts the revocations of the site agent's certificates: one issued
	// in an earlier epoch is refused.
	IdentityEpoch int64 `json:"identityEpoch"`
	// AgentRevoked is the last of those revocations (sites revoke-identity); nil when
	// there was none.
	AgentRevoked *Revocation `json:"agentRevoked,omitempty"`
}

// Revocation is an operator's revocation of an agent identity's certificates.
type Revocation struct {
	// Epoch is the identity epoch it moved to: certificates of earlier ones are refused.
	Epoch int64     `json:"epoch"`
	At    time.Time `json:"at"`
	// Reason is the operator's words.
	Reason string `json:"reason"`
	// By is the credential that asked.
	By string `json:"by,omitempty"`
	// FailedWorkflowID is, for a node's, the workflow it failed (metal.revokeCertificates'
	// failedWorkflowId); left out when it failed none.
	FailedWorkflowID string `json:"failedWorkflowId,omitempty"`
	// FailedWorkflowNext is, with FailedWorkflowID, what works once the machine is
	// trusted again, for the failed workflow's kind (metal.RunAgain): `nodes retry`, or,
	// for one that works with the installed OS, its join again first.
	FailedWorkflowNext string `json:"failedWorkflowNext,omitempty"`
}

// revocationOf is r as the API shows it; nil for nil.
func revocationOf(r *store.Revocation) *Revocation {
	if r == nil {
		return nil
	}
	return &Revocation{Epoch: r.Epoch, At: r.At, Reason: r.Reason, By: r.By, FailedWorkflowID: r.FailedWorkflow}
}

// SiteAgent is whether a site's agent (bcd site) is connected, as the registry holding
// its session recorded it in the store at the session's hello and end, and while that
// registry's lease holds (a registry that died took its sessions with it): every
// registry sharing the store answers the same.
type SiteAgent struct {
	ID        string `json:"id"`
	Connected bool   `json:"connected"`
	// Since is when its session opened: the open one's when connected, else the last
	// one's; zero when it never connected.
	Since time.Time `json:"since,omitzero"`
	// LastSeen is its session's hello, or its end when it is not connected (the hello
	// when its registry died holding it).
	LastSeen time.Time `json:"lastSeen,omitzero"`
}

// siteAgentOf reads whether the agent of site is connected.
func siteAgentOf(tx *store.Tx, siteID string) (*SiteAgent, error) {
	a := &SiteAgent{ID: site.Agent(siteID)}
	s, ok, err := tx.AgentSession(a.ID)
	if err != nil || !ok {
		return a, err
	}
	a.Since, a.LastSeen = s.OpenedAt, s.LastSeen
	a.Connected, err = s.Live(tx)
	return a, err
}

// ImageLocation is an image held by a site's cache.
type ImageLocation struct {
	Site      string                `json:"siteId"`
	ImageID   string                `json:"imageId"`
	Digest    string                `json:"digest"`
	State     proto.ImageCacheState `json:"state"`
	SizeBytes int64                 `json:"sizeBytes"`
	LastUsed  time.Time             `json:"lastUsed,omitzero"`
	// Reason is why a failed image failed, when the site's cache said:
	// source-not-allowed (a request of its fetch went outside the site's image sources)
	// or capacity (it does not fit the cache).
	Reason string `json:"reason,omitempty"`
	// RefusedHost is, for source-not-allowed, the host and port the fetch was refused
	// at: list it in the site's image sources (sites update --image-sources) to have the
	// image pulled at once.
	RefusedHost string    `json:"refusedHost,omitempty"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

// InventorySection is one inventory section an agent reported, as it sent it last.
type InventorySection struct {
	Node      string          `json:"node"`
	Section   string          `json:"section"`
	Data      json.RawMessage `json:"data"`
	UpdatedAt time.Time       `json:"updatedAt"`
	// Refused, when set, says the agent's latest report of the section was refused as
	// too large to store (docs/site.md#section-budgets): Data is the copy stored before.
	Refused *SectionRefused `json:"refused,omitempty"`
}

// SectionRefused is when an inventory section's report was refused for its size, and
// how many bytes of JSON it was.
type SectionRefused struct {
	At    time.Time `json:"at"`
	Bytes int       `json:"bytes"`
	// LeftOut counts the entries of the copy shown that were left out so that it could
	// take this mark (a copy an earlier release stored at the bound): it holds the first
	// of them. Left out when the copy is whole.
	LeftOut int `json:"leftOut,omitempty"`
}

// CachePlan is what a site's cache should hold, which pre-warm refs were left out, and
// which images of the plan the site's cache failed to pull.
type CachePlan struct {
	Site        string             `json:"siteId"`
	CacheImages []proto.CacheImage `json:"cacheImages"`
	Excluded    []ExcludedImage    `json:"excluded"`
	Failed      []FailedImage      `json:"failed"`
}

// FailedImage is an image of a site's cache plan that the site's cache failed to pull
// from its source, as the site's agent last reported it, and why when the cache said:
// reason source-not-allowed with the host and port the fetch was refused at (a
// redirect's, a token realm's, or the loopback or link-local address a name led to), or
// capacity. A refused host listed with `sites update --image-sources` has the image
// pulled again at once.
type FailedImage struct {
	Ref         string `json:"ref"`
	Digest      string `json:"digest"`
	Source      string `json:"source"`
	Reason      string `json:"reason,omitempty"`
	RefusedHost string `json:"refusedHost,omitempty"`
}

// ExcludedImage is a pool's pre-warm ref that is not in the site's cache plan, and why
// (not-found, unsigned, signature, untrusted-signer, source-not-allowed, not-ramdisk).
type ExcludedImage struct {
	Tenant  string `json:"tenantId"`
	Pool    string `json:"pool"`
	Ref     string `json:"ref"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// KnownMACs is the answer of sites.knownMacs: how many MACs the site knows (its agent's
// site.knownMacs), the bound, and one page of the enrolled MACs it does not know.
type KnownMACs struct {
	Site  string `json:"siteId"`
	Known int    `json:"known"`
	// Max is the most MACs a site knows (proto.MaxKnownMACs).
	Max int `json:"max"`
	// LeftOutCount counts the MACs left out, on every page.
	LeftOutCount int          `json:"leftOutCount"`
	LeftOut      []LeftOutMAC `json:"leftOut"`
	NextCursor   string       `json:"nextCursor,omitempty"`
}

// LeftOutMAC is a MAC enrolled at a site that the site does not know, whose node it is,
// and why (site-share: the site was over its bound and the tenant had the most MACs
// there).
type LeftOutMAC struct {
	MAC    string `json:"mac"`
	Tenant string `json:"tenantId"`
	Node   string `json:"nodeId"`
	Reason string `json:"reason"`
}

func siteOf(s store.Site) Site {
	return Site{ID: s.ID, CreatedAt: s.CreatedAt, BMCNetworks: s.BMCNetworks, ImageSources: s.ImageSources,
		IdentityEpoch: s.IdentityEpoch, AgentRevoked: revocationOf(s.AgentRevoked)}
}

func leftOutOf(l site.LeftOut) LeftOutMAC {
	return LeftOutMAC{MAC: l.MAC, Tenant: l.Tenant, Node: l.Node, Reason: l.Reason}
}

func locationOf(l store.ImageLocation) ImageLocation {
	return ImageLocation{Site: l.Site, ImageID: l.ImageID, Digest: l.Digest, State: l.State, SizeBytes: l.SizeBytes, LastUsed: l.LastUsed,
		Reason: l.Reason, RefusedHost: l.RefusedHost, UpdatedAt: l.UpdatedAt}
}

func sectionOf(s store.InventorySection) InventorySection {
	out := InventorySection{Node: s.Node, Section: s.Section, Data: s.Data, UpdatedAt: s.UpdatedAt}
	if s.Refused != nil {
		out.Refused = &SectionRefused{At: s.Refused.At, Bytes: s.Refused.Bytes, LeftOut: s.Refused.LeftOut}
	}
	return out
}

func cachePlanOf(p image.CachePlan, failed []image.FailedImage) CachePlan {
	v := CachePlan{Site: p.Site, CacheImages: p.CacheImages, Excluded: make([]ExcludedImage, 0, len(p.Excluded)),
		Failed: make([]FailedImage, 0, len(failed))}
	for _, e := range p.Excluded {
		v.Excluded = append(v.Excluded, ExcludedImage(e))
	}
	for _, f := range failed {
		v.Failed = append(v.Failed, FailedImage(f))
	}
	return v
}
