package api

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// The actions a credential can carry. A method names the one it needs.
const (
	ActionTenantsManage     = "compute:tenants:manage"
	ActionCredentialsManage = "compute:credentials:manage"
	ActionProfilesManage    = "compute:profiles:manage"
	ActionProfilesRead      = "compute:profiles:read"
	ActionImagesPublish     = "compute:images:publish"
	ActionImagesRead        = "compute:images:read"
	ActionSitesManage       = "compute:sites:manage"
	ActionPoolsManage       = "compute:pools:manage"
	ActionTokensManage      = "compute:tokens:manage"
	ActionNodesManage       = "compute:nodes:manage"
	ActionNodesRead         = "compute:nodes:read"
	ActionSecretsManage     = "compute:secrets:manage"
	// ActionAll stands for every action, present and future: the admin credential's.
	ActionAll = "*"
)

// Actions lists every action a credential may be given.
var Actions = []string{ActionTenantsManage, ActionCredentialsManage, ActionProfilesManage,
	ActionProfilesRead, ActionImagesPublish, ActionImagesRead, ActionSitesManage, ActionPoolsManage, ActionTokensManage,
	ActionNodesManage, ActionNodesRead, ActionSecretsManage}

// Caller is who is calling: the credential's tenant and actions, or the host itself
// through the admin socket.
type Caller struct {
	Tenant       string
	Actions      []string
	CredentialID string
	// Host is true for calls through the admin socket in the data directory: only the
	// registry's own host can make them, and host-only methods accept nothing else.
	Host bool
	// Source is the address of the call's connection (api.remoteAddr); "" for a call
	// without one (in-process, or through the admin socket).
	Source string
	// st is the store; reads is the request's Reader, once taken (reader).
	st    *store.Store
	reads *store.Reader
	// ticket is the call's place in the admission of authenticated calls; nil for the
	// host's and the public calls.
	ticket *ticket
}

// awaitChange is what a long poll calls as it starts to wait for a change: it gives its
// running slot to the next call, and is refused (tenant-busy) when the caller's tenant
// has as many long polls waiting as it may.
func (c *Caller) awaitChange() error {
	if c.ticket == nil {
		return nil
	}
	return c.ticket.watch()
}

// view runs fn in a read-only transaction at least as recent as the request, through
// the request's Reader (reader).
func (c *Caller) view(fn func(*store.Tx) error) error {
	rd, err := c.reader()
	if err != nil {
		return err
	}
	return rd.View(fn)
}

// update runs fn in a read-write transaction reading at least as recent as the request,
// through the request's Reader as view does: on etcd it takes no barrier of its own.
func (c *Caller) update(fn func(*store.Tx) error) error {
	rd, err := c.reader()
	if err != nil {
		return err
	}
	return rd.Update(fn)
}

// reader is the request's Reader: its credential's, when the caller authenticated, else
// the store's, taken on first use (on etcd, one barrier round for the whole request).
func (c *Caller) reader() (*store.Reader, error) {
	if c.reads == nil {
		rd, err := c.st.Reader()
		if err != nil {
			return nil, err
		}
		c.reads = &rd
	}
	return c.reads, nil
}

// Can reports whether the caller holds action.
func (c *Caller) Can(action string) bool {
	return slices.Contains(c.Actions, ActionAll) || slices.Contains(c.Actions, action)
}

// TenantFor resolves the tenant a request acts for: the caller's own when requested is
// empty. Only the root tenant's credentials act for other tenants; for anyone else
// another tenant is NOT_FOUND, so its existence is not revealed.
func (c *Caller) TenantFor(tx *store.Tx, requested string) (string, error) {
	if requested == "" || requested == c.Tenant {
		return c.Tenant, nil
	}
	if c.Tenant != store.RootTenant {
		return "", proto.Errorf(proto.NotFound, "tenant %q not found: leave --tenant out to act for the credential's own (%s)", requested, c.Tenant).WithPath("tenantId")
	}
	if _, err := tx.Tenant(requested); err != nil {
		return "", proto.AsError(err).WithPath("tenantId")
	}
	return requested, nil
}

// elsewhere adds to err, a NOT_FOUND at path of an object a request named in tenant,
// what the root tenant's callers need when another tenant owns the object: whose it is
// and the flag that reaches it. owner returns that tenant ("" when none has the object);
// it runs only for such a caller and error. Every other caller gets err as it is, so to
// a tenant another tenant's object stays indistinguishable from one that does not exist.
func (c *Caller) elsewhere(err error, path, tenant string, owner func() string) error {
	return c.elsewhereSaying(err, path, tenant, owner, addTenant)
}

// addTenant is elsewhere's way to another tenant's object: the flag that reaches it.
func addTenant(owner string) string {
	return fmt.Sprintf("tenant %s has it: add --tenant %s", owner, owner)
}

// elsewhereSaying is elsewhere, telling the root tenant's callers what say says of the
// owner: where --tenant is not the way (a deploy, whose node is the tenant's), the one
// that is.
func (c *Caller) elsewhereSaying(err error, path, tenant string, owner func() string, say func(owner string) string) error {
	e, ok := errors.AsType[*proto.Error](err)
	if !ok || c.Tenant != store.RootTenant || e.Code != proto.NotFound || e.Details.Path != path {
		return err
	}
	o := owner()
	if o == "" || o == tenant {
		return err
	}
	hinted := *e
	hinted.Message += "; " + say(o)
	return &hinted
}

// forTenant is err, of a request the caller made for another tenant (a root tenant's
// credential with --tenant T), with that tenant's flag added to each command of the
// tenant's it suggests in backticks (`nodes cancel ID` becomes `nodes cancel ID --tenant
// T`): pasted without it, the command would act in the caller's own tenant and not find
// the node. A request made for the caller's own tenant gets err as it is.
func (c *Caller) forTenant(err error, tenant string) error {
	e, ok := errors.AsType[*proto.Error](err)
	if !ok || tenant == "" || tenant == c.Tenant {
		return err
	}
	spans := strings.Split(e.Message, "`")
	for i := 1; i < len(spans)-1; i += 2 { // the odd spans are quoted, when a backtick closes them
		if tenantCommand(spans[i]) && !strings.Contains(spans[i], "--tenant") {
			spans[i] += " --tenant " + tenant
		}
	}
	hinted := *e
	hinted.Message = strings.Join(spans, "`")
	return &hinted
}

// tenantCommand says whether quoted is a command of the groups whose objects a tenant
// holds (nodes, workflows, profiles), which act for the credential's own tenant unless
// --tenant says another.
func tenantCommand(quoted string) bool {
	group, _, _ := strings.Cut(quoted, " ")
	return slices.Contains([]string{"nodes", "workflows", "profiles"}, group) && strings.Contains(quoted, " ")
}

// notFoundAt is err at path when it is a NOT_FOUND naming no field: the store tells of
// a record it does not have by its key, and the caller is told which field of its
// request named it, as every NOT_FOUND of a named record is.
func notFoundAt(err error, path string) error {
	if e, ok := errors.AsType[*proto.Error](err); ok && e.Code == proto.NotFound && e.Details.Path == "" {
		return e.WithPath(path)
	}
	return err
}

// nodeOwner is the tenant of node id, "" when there is none.
func nodeOwner(tx *store.Tx, id string) func() string {
	return func() string {
		n, _ := tx.Node(id)
		return n.Tenant
	}
}

// firstTenant is the first tenant, by name, for which has holds; "" when none does.
func firstTenant(tx *store.Tx, has func(tenant string) bool) string {
	page := store.Page{}
	for {
		tenants, next, err := tx.Tenants(page)
		if err != nil {
			return ""
		}
		for _, tn := range tenants {
			if has(tn.ID) {
				return tn.ID
			}
		}
		if next == "" {
			return ""
		}
		page.Cursor = next
	}
}

// poolOwner is the first tenant with a pool of that name, "" when none has.
func poolOwner(tx *store.Tx, name string) func() string {
	return func() string {
		return firstTenant(tx, func(tn string) bool { _, err := tx.Pool(tn, name); return err == nil })
	}
}

// imageOwner is the tenant of image id, "" when there is none.
func imageOwner(tx *store.Tx, id string) func() string {
	return func() string {
		img, _ := tx.Image(id)
		return img.Tenant
	}
}
