package api

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// ProfileKey names one version of a profile as a request gives it: the version is the
// latest when left out (0).
type ProfileKey struct {
	TenantID       string `json:"tenantId,omitempty"`
	ID             string `json:"id"`
	ProfileVersion int    `json:"profileVersion,omitempty"`
}

// Document is a profile document in a request: a JSON object, or a string holding the
// document's text (so that a document that is not even JSON gets a precise error).
type Document []byte

// UnmarshalJSON keeps an object's bytes as they are, or a string's text.
func (d *Document) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*d = Document(s)
		return nil
	}
	*d = append((*d)[:0], b...)
	return nil
}

// MarshalJSON sends the document's text as a JSON string.
func (d Document) MarshalJSON() ([]byte, error) { return proto.Marshal(string(d)) }

// CreateProfileRequest is the body of profiles.create.
type CreateProfileRequest struct {
	TenantID string   `json:"tenantId,omitempty"`
	Document Document `json:"document"`
	// Visibility is private (the default) or public.
	Visibility string `json:"visibility,omitempty"`
}

// ProfileView is a stored or shipped profile version as the API shows it.
type ProfileView struct {
	// TenantID owns the profile; "builtin" for a shipped one.
	TenantID   string          `json:"tenantId"`
	ID         string          `json:"id"`
	Version    int             `json:"version"`
	Visibility string          `json:"visibility"`
	Rev        int             `json:"rev"`
	Used       bool            `json:"used"`
	CreatedAt  time.Time       `json:"createdAt,omitzero"`
	UpdatedAt  time.Time       `json:"updatedAt,omitzero"`
	Document   json.RawMessage `json:"document,omitempty"`
}

// ProfileList is the answer of profiles.list; documents are left out.
type ProfileList struct {
	Profiles   []ProfileView `json:"profiles"`
	NextCursor string        `json:"nextCursor,omitempty"`
}

// ListProfilesRequest is the body of profiles.list.
type ListProfilesRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	ListRequest
}

// ValidateProfileRequest is the body of profiles.validate: a stored version by key, or a
// document that is not stored.
type ValidateProfileRequest struct {
	ProfileKey
	Document Document `json:"document,omitempty"`
}

// Validation is the answer of profiles.validate: every problem at once.
type Validation struct {
	Valid  bool    `json:"valid"`
	Issues []Issue `json:"issues"`
}

// Rendering is the answer of profiles.render.
type Rendering struct {
	TenantID string         `json:"tenantId"`
	ID       string         `json:"id"`
	Version  int            `json:"version"`
	Steps    []RenderedStep `json:"steps"`
}

// UpdateProfileRequest is the body of profiles.update: a replacement document (whose id
// and version name the row) or a new visibility, guarded by the row version.
type UpdateProfileRequest struct {
	ProfileKey
	Document   Document `json:"document,omitempty"`
	Visibility string   `json:"visibility,omitempty"`
	// IfVersion, when set, must equal the row's rev.
	IfVersion int `json:"ifVersion,omitempty"`
}

// DeletedProfiles is the answer of profiles.delete.
type DeletedProfiles struct {
	ID       string `json:"id"`
	Versions []int  `json:"versions"`
}

// profiles holds what the profile methods share: the shipped profiles, made once.
type profiles struct {
	srv     *Server
	shipped []store.ProfileRecord
}

// newProfiles makes what the profile methods share: the shipped profiles as rows.
func newProfiles(s *Server) *profiles { return &profiles{srv: s, shipped: shippedRecords()} }

func (s *Server) registerProfiles() {
	ps := newProfiles(s)
	Handle(s, "profiles.create", ActionProfilesManage, ps.create)
	Handle(s, "profiles.get", ActionProfilesRead, ps.get)
	Handle(s, "profiles.list", ActionProfilesRead, ps.list)
	Handle(s, "profiles.validate", ActionProfilesRead, ps.validate)
	Handle(s, "profiles.render", ActionProfilesRead, ps.render)
	Handle(s, "profiles.update", ActionProfilesManage, ps.update)
	Handle(s, "profiles.delete", ActionProfilesManage, ps.delete)
}

// shippedRecords are the shipped profiles as stored records of the builtin tenant.
func shippedRecords() []store.ProfileRecord {
	var out []store.ProfileRecord
	for _, p := range profile.Shipped() {
		out = append(out, store.ProfileRecord{
			Tenant: store.BuiltinTenant, ID: p.ID(), Version: p.Version(), Visibility: store.Public,
			Document: p.Document(), Rev: 1, Used: true,
		})
	}
	return out
}

// define checks a document from a request: problems are INVALID_INPUT with the same path
// as INVALID_CONFIG would have.
func define(doc Document) (*profile.Profile, error) {
	if len(doc) == 0 {
		return nil, proto.Errorf(proto.InvalidInput, "document is required: the profile as JSON").WithPath("document")
	}
	p, err := profile.Define(doc)
	if err != nil {
		return nil, proto.AsError(err).WithCode(proto.InvalidInput)
	}
	return p, nil
}

func (ps *profiles) create(_ context.Context, c *Caller, req CreateProfileRequest) (out ProfileView, err error) {
	p, err := define(req.Document)
	if err != nil {
		return out, err
	}
	if ps.isShipped(p.ID()) {
		return out, proto.Errorf(proto.Conflict, "profile id %s is reserved: a shipped profile has it, for every tenant; give yours another id", p.ID()).WithPath("id").WithReason(proto.ReasonReservedID)
	}
	err = inTenant(c.update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
		rec, err := tx.CreateProfile(store.ProfileRecord{
			Tenant: tenant, ID: p.ID(), Version: p.Version(), Visibility: req.Visibility, Document: p.Document(),
		})
		out = view(rec, true)
		return err
	})
	return out, err
}

// isShipped reports whether id is the id of a shipped profile: such an id is reserved.
func (ps *profiles) isShipped(id string) bool {
	return slices.ContainsFunc(ps.shipped, func(r store.ProfileRecord) bool { return r.ID == id })
}

// resolve finds the version a key names as the caller's tenant sees it. A bare id is
// the shipped profile when a shipped one has the id (a stored row with a shipped id
// never shadows it), else the tenant's own, else a public one of the platform (the
// root tenant). TENANT/ID names another tenant's public profile (or, with the tenant's
// own name, its own; builtin/ID a shipped one): no other tenant's profile is ever
// reached without its owner's name.
func (ps *profiles) resolve(tx *store.Tx, c *Caller, key ProfileKey) (store.ProfileRecord, error) {
	return ps.resolveSaying(tx, c, key, addTenant)
}

// resolveSaying is resolve, telling the root tenant's callers what say says of the
// tenant that holds a profile of the id the caller's tenant does not reach
// (Caller.elsewhereSaying).
func (ps *profiles) resolveSaying(tx *store.Tx, c *Caller, key ProfileKey, say func(owner string) string) (store.ProfileRecord, error) {
	tenant, err := c.TenantFor(tx, key.TenantID)
	if err != nil {
		return store.ProfileRecord{}, err
	}
	if key.ID == "" {
		return store.ProfileRecord{}, proto.Errorf(proto.InvalidInput, "id is required").WithPath("id")
	}
	if err := checkProfileVersion(key.ProfileVersion); err != nil {
		return store.ProfileRecord{}, err
	}
	owner, id, err := proto.SplitOwner(key.ID)
	if err != nil {
		return store.ProfileRecord{}, proto.AsError(err).WithPath("id")
	}
	var rec store.ProfileRecord
	var ok bool
	switch {
	case owner == store.BuiltinTenant || owner == "" && ps.isShipped(id):
		if rec, ok = ps.shippedVersion(id, key.ProfileVersion); ok {
			return rec, nil
		}
	case owner == "" || owner == tenant:
		if rec, ok, err = ownProfile(tx, tenant, id, key.ProfileVersion); err != nil || ok {
			return rec, err
		}
		if owner == "" && tenant != store.RootTenant {
			if rec, ok, err = tx.PublicProfile(store.RootTenant, id, key.ProfileVersion); err != nil || ok {
				return rec, err
			}
		}
	default:
		if rec, ok, err = tx.PublicProfile(owner, id, key.ProfileVersion); err != nil || ok {
			return rec, err
		}
	}
	return rec, c.elsewhereSaying(notFoundProfile(key), "id", tenant, func() string {
		if owner != "" {
			return ""
		}
		return firstTenant(tx, func(tn string) bool { _, ok, _ := ownProfile(tx, tn, id, key.ProfileVersion); return ok })
	}, say)
}

// ownProfile is one of tenant's own undeleted versions: the given one, or the latest
// when version is 0.
func ownProfile(tx *store.Tx, tenant, id string, version int) (store.ProfileRecord, bool, error) {
	if version == 0 {
		return tx.LatestProfile(tenant, id)
	}
	rec, ok, err := tx.Profile(tenant, id, version)
	return rec, ok && !rec.Deleted, err
}

// shippedVersion is a shipped profile's given version, or its highest when version is 0.
func (ps *profiles) shippedVersion(id string, version int) (store.ProfileRecord, bool) {
	var best *store.ProfileRecord
	for i, s := range ps.shipped {
		if s.ID == id && (s.Version == version || version == 0 && (best == nil || s.Version > best.Version)) {
			best = &ps.shipped[i]
		}
	}
	if best == nil {
		return store.ProfileRecord{}, false
	}
	return *best, true
}

// checkProfileVersion refuses a profileVersion under 0: 0 (left out) is the latest
// version, or every version for profiles.delete, and no other number below 1 may stand
// for either.
func checkProfileVersion(version int) error {
	if version < 0 {
		return proto.Errorf(proto.InvalidInput, "profileVersion must be a positive whole number, or left out").WithPath("profileVersion")
	}
	return nil
}

func notFoundProfile(key ProfileKey) *proto.Error {
	name := key.ID
	if key.ProfileVersion > 0 {
		name = profileLabel(key.ID, key.ProfileVersion)
	}
	return proto.Errorf(proto.NotFound, "profile %q not found: `profiles list` shows what this tenant can use", name).WithPath("id")
}

func profileLabel(id string, version int) string { return fmt.Sprintf("%s@%d", id, version) }

func (ps *profiles) get(_ context.Context, c *Caller, key ProfileKey) (out ProfileView, err error) {
	err = c.view(func(tx *store.Tx) error {
		rec, err := ps.resolve(tx, c, key)
		out = view(rec, true)
		return err
	})
	return out, err
}

func (ps *profiles) list(_ context.Context, c *Caller, req ListProfilesRequest) (out ProfileList, err error) {
	out.Profiles, out.NextCursor, err = tenantPage(c, req.TenantID, req.ListRequest, func(tx *store.Tx, tenant string, page store.Page) ([]ProfileView, string, error) {
		recs, next, err := tx.ListProfiles(tenant, ps.shipped, page)
		views := make([]ProfileView, 0, len(recs))
		for _, r := range recs {
			views = append(views, view(r, false))
		}
		return views, next, err
	})
	return out, err
}

func (ps *profiles) validate(_ context.Context, c *Caller, req ValidateProfileRequest) (out Validation, err error) {
	if err := checkOneProfile(req); err != nil {
		return out, err
	}
	doc := []byte(req.Document)
	if len(doc) == 0 {
		err = c.view(func(tx *store.Tx) error {
			rec, err := ps.resolve(tx, c, req.ProfileKey)
			doc = rec.Document
			return err
		})
		if err != nil {
			return out, err
		}
	}
	out.Issues = viewsOf(profile.Check(doc), issueOf)
	out.Valid = len(out.Issues) == 0
	return out, nil
}

// checkOneProfile refuses a validate request naming both a document and a stored
// version: the answer would speak of one of the two while the caller may read it as the
// other's, so it names the field to leave out rather than pick one without a word.
func checkOneProfile(req ValidateProfileRequest) error {
	if len(req.Document) == 0 {
		return nil
	}
	switch {
	case req.ID != "":
		return proto.Errorf(proto.InvalidInput, "give a document or the id of a stored profile, not both").WithPath("id")
	case req.ProfileVersion != 0:
		return proto.Errorf(proto.InvalidInput, "profileVersion names a stored version: leave it out with a document").WithPath("profileVersion")
	}
	return nil
}

func (ps *profiles) render(_ context.Context, c *Caller, key ProfileKey) (out Rendering, err error) {
	var rec store.ProfileRecord
	err = c.view(func(tx *store.Tx) (err error) { rec, err = ps.resolve(tx, c, key); return err })
	if err != nil {
		return out, err
	}
	p, err := profile.DefineStored(rec.ID, rec.Version, rec.Document)
	if err != nil {
		return out, err
	}
	return Rendering{TenantID: rec.Tenant, ID: rec.ID, Version: rec.Version, Steps: viewsOf(profile.Render(p), renderedOf)}, nil
}

func (ps *profiles) update(_ context.Context, c *Caller, req UpdateProfileRequest) (out ProfileView, err error) {
	hasDoc, hasVis := len(req.Document) > 0, req.Visibility != ""
	if hasDoc == hasVis {
		return out, proto.Errorf(proto.InvalidInput, "give either a replacement document or a visibility").WithPath("document")
	}
	if hasVis && req.ID == "" {
		return out, proto.Errorf(proto.InvalidInput, "id is required: name the profile whose visibility changes").WithPath("id")
	}
	if err := checkProfileVersion(req.ProfileVersion); err != nil {
		return out, err
	}
	var p *profile.Profile
	if hasDoc {
		if p, err = define(req.Document); err != nil {
			return out, err
		}
		if req.ID != "" && req.ID != p.ID() || req.ProfileVersion != 0 && req.ProfileVersion != p.Version() {
			return out, proto.Errorf(proto.InvalidInput, "the document is %s, not the version named by the request", profileLabel(p.ID(), p.Version())).WithPath("id")
		}
	}
	err = inTenant(c.update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
		var rec store.ProfileRecord
		var err error
		if hasDoc {
			rec, err = tx.ReplaceProfileDocument(tenant, p.ID(), p.Version(), req.IfVersion, p.Document())
		} else {
			version := req.ProfileVersion
			if version == 0 {
				latest, ok, err := tx.LatestProfile(tenant, req.ID)
				if err != nil {
					return err
				}
				if !ok {
					return notFoundProfile(req.ProfileKey)
				}
				version = latest.Version
			}
			rec, err = tx.SetProfileVisibility(tenant, req.ID, version, req.IfVersion, req.Visibility)
		}
		out = view(rec, true)
		if hasDoc && req.ID == "" {
			return notFoundAt(err, "document") // the document names the profile
		}
		return notFoundAt(err, "id")
	})
	return out, err
}

func (ps *profiles) delete(_ context.Context, c *Caller, key ProfileKey) (out DeletedProfiles, err error) {
	if key.ID == "" {
		return out, proto.Errorf(proto.InvalidInput, "id is required").WithPath("id")
	}
	if err := checkProfileVersion(key.ProfileVersion); err != nil {
		return out, err
	}
	out.ID, out.Versions = key.ID, []int{}
	for {
		var hid []int
		err = c.update(func(tx *store.Tx) error {
			tenant, err := c.TenantFor(tx, key.TenantID)
			if err != nil {
				return err
			}
			hid, err = tx.DeleteProfile(tenant, key.ID, key.ProfileVersion)
			return notFoundAt(err, "id")
		})
		switch {
		case err != nil && len(out.Versions) > 0 && proto.CodeOf(err) == proto.NotFound:
			return out, nil // the last transaction hid the last of them
		case err != nil:
			return out, err
		}
		out.Versions = append(out.Versions, hid...)
		if len(hid) < store.MaxHidden {
			return out, nil
		}
	}
}

func view(r store.ProfileRecord, withDocument bool) ProfileView {
	v := ProfileView{TenantID: r.Tenant, ID: r.ID, Version: r.Version, Visibility: r.Visibility,
		Rev: r.Rev, Used: r.Used, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if withDocument {
		v.Document = r.Document
	}
	return v
}
