package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// credentialID is the id of the only credential of tenant.
func credentialID(t *testing.T, reg *testkit.Registry, tenant string) string {
	t.Helper()
	var creds api.CredentialList
	testkit.JSON(t, reg.AdminConfig, &creds, "credentials", "list", "--tenant", tenant)
	if len(creds.Credentials) != 1 {
		t.Fatalf("tenant %s has %d credentials", tenant, len(creds.Credentials))
	}
	return creds.Credentials[0].ID
}

// nodeOf is the node as the API answers it now.
func nodeOf(t *testing.T, reg *testkit.Registry, tenant, id string) api.Node {
	t.Helper()
	var n api.Node
	testkit.JSON(t, reg.AdminConfig, &n, "nodes", "get", id, "--tenant", tenant)
	return n
}

// element is the text of the element of page p with id, its tags taken out.
func element(t *testing.T, p page, id string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)id="` + id + `">(.*?)</dd>`).FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("the page (%d) has no %s:\n%s", p.status, id, p.body)
	}
	return regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[1], "")
}

// TestPagesShowAgentRevocations: a node's page shows its installation (identity epoch 0,
// never raised) and no revocation; after an operator revokes its agents' certificates
// through the API it shows the new epoch, when it was raised, and the revocation's
// epoch, reason and credential. The sites page shows each site's last revocation of its
// agent's certificates likewise.
func TestPagesShowAgentRevocations(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	b := newClient(t, reg)
	b.signIn(acme)
	p := b.get("/ui/nodes/" + acmeNode.ID)
	if got := element(t, p, "identity-epoch"); !strings.Contains(got, "identity epoch 0, never raised") {
		t.Errorf("a new node's installation: %q", got)
	}
	if strings.Contains(p.body, `id="agents-revoked"`) {
		t.Errorf("a node whose agents were never revoked shows a revocation")
	}

	var out api.CertificatesRevoked
	testkit.JSON(t, acme, &out, "nodes", "revoke-identity", acmeNode.ID, "--reason", "laptop with the token stolen")
	n := nodeOf(t, reg, "acme", acmeNode.ID)
	p = b.get("/ui/nodes/" + acmeNode.ID)
	if got, want := element(t, p, "identity-epoch"), "identity epoch 1, raised "+n.IdentityEpochAt.UTC().Format("2006-01-02 15:04:05Z"); !strings.Contains(got, want) {
		t.Errorf("the installation after a revocation: %q, want %q", got, want)
	}
	got := element(t, p, "agents-revoked")
	for _, want := range []string{"revoked " + out.RevokedAt.UTC().Format("2006-01-02 15:04:05Z"), "by " + credentialID(t, reg, "acme"), "(identity epoch 1)", "laptop with the token stolen"} {
		if !strings.Contains(got, want) {
			t.Errorf("the revocation shows %q, without %q", got, want)
		}
	}

	admin := newClient(t, reg)
	admin.signIn(reg.AdminConfig)
	site := func() string {
		p := admin.get("/ui/sites")
		m := regexp.MustCompile(`(?s)class="agent-revoked">(.*?)</dd>`).FindStringSubmatch(p.body)
		if p.status != http.StatusOK || m == nil {
			t.Fatalf("the sites page (%d) shows no revocation of rack-a's agent:\n%s", p.status, p.body)
		}
		return regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[1], "")
	}
	if got := site(); !strings.Contains(got, "identity epoch 0 · never revoked") {
		t.Errorf("rack-a before a revocation: %q", got)
	}
	testkit.JSON(t, reg.AdminConfig, &out, "sites", "revoke-identity", "rack-a", "--reason", "site agent host reinstalled")
	got = site()
	for _, want := range []string{"identity epoch 1 · revoked " + out.RevokedAt.UTC().Format("2006-01-02 15:04:05Z"), "by " + credentialID(t, reg, "root"),
		": site agent host reinstalled"} {
		if !strings.Contains(got, want) {
			t.Errorf("rack-a's revocation shows %q, without %q", got, want)
		}
	}
}

// TestRevokeAgentCertificatesFromTheNodePage: the node's page links to the confirmation
// of "revoke agent certificates", whose form, sent with a reason, moves the node's
// identity epoch through the API and records the reason and the session's credential,
// then shows the node with it. A credential of the same tenant that may read nodes but
// not manage them gets the API's FORBIDDEN on the confirmation page, and the node stays
// as it was.
func TestRevokeAgentCertificatesFromTheNodePage(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	acmeID := credentialID(t, reg, "acme")
	b := newClient(t, reg)
	b.signIn(acme)
	path := "/ui/nodes/" + acmeNode.ID + "/revoke-certificates"
	if p := b.get("/ui/nodes/" + acmeNode.ID); !strings.Contains(p.body, `id="action-revoke-certificates" href="`+path+`">revoke agent certificates…</a>`) {
		t.Errorf("the node's page offers no revocation:\n%s", p.body)
	}
	confirm := b.get(path)
	if confirm.status != http.StatusOK || !strings.Contains(confirm.body, `name="reason"`) || !strings.Contains(confirm.body, "Yes, revoke agent certificates "+acmeNode.ID) {
		t.Fatalf("the confirmation (%d):\n%s", confirm.status, confirm.body)
	}

	reader := filepath.Join(t.TempDir(), "reader.conf")
	var cred api.CreatedCredential
	testkit.JSON(t, reg.AdminConfig, &cred, "credentials", "create", "--tenant", "acme", "--actions", "compute:nodes:read", "--out", reader)
	r := newClient(t, reg)
	r.signIn(reader)
	p := r.post(path, url.Values{"csrf": {r.csrf(path)}, "reason": {"a reader tries"}})
	if p.status != http.StatusForbidden || !strings.Contains(p.body, "FORBIDDEN") || !strings.Contains(p.body, "compute:nodes:manage") ||
		!strings.Contains(p.body, `value="a reader tries"`) {
		t.Errorf("a reader's revocation (%d):\n%s", p.status, p.body)
	}
	if n := nodeOf(t, reg, "acme", acmeNode.ID); n.IdentityEpoch != 0 || n.AgentsRevoked != nil || n.Rev != acmeNode.Rev {
		t.Fatalf("a reader's refused revocation changed the node: epoch %d, %+v, rev %d (was %d)", n.IdentityEpoch, n.AgentsRevoked, n.Rev, acmeNode.Rev)
	}

	p = b.post(path, url.Values{"csrf": {b.csrf(path)}, "reason": {"BMC password leaked"}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/nodes/"+acmeNode.ID {
		t.Fatalf("the revocation (%d, to %q):\n%s", p.status, p.header.Get("Location"), p.body)
	}
	n := nodeOf(t, reg, "acme", acmeNode.ID)
	if n.IdentityEpoch != 1 || n.AgentsRevoked == nil || n.AgentsRevoked.Epoch != 1 || n.AgentsRevoked.Reason != "BMC password leaked" ||
		n.AgentsRevoked.By != acmeID {
		t.Fatalf("after the console's revocation the node has epoch %d, revocation %+v", n.IdentityEpoch, n.AgentsRevoked)
	}
	if got := element(t, b.get("/ui/nodes/"+acmeNode.ID), "agents-revoked"); !strings.Contains(got, "BMC password leaked") {
		t.Errorf("the node's page after the revocation: %q", got)
	}
}

// TestAnotherTenantCannotRevokeAgentCertificates: tenant beta's credential, which may
// manage nodes and revokes its own node's agents through the console's form, posts the
// same form with its own session and token for acme's node: the answer is the one of a
// node that does not exist, and acme's node keeps its identity epoch.
func TestAnotherTenantCannotRevokeAgentCertificates(t *testing.T) {
	reg, _, acmeNode, betaNode := twoTenants(t)
	beta := filepath.Join(t.TempDir(), "beta.conf")
	testkit.JSON(t, reg.AdminConfig, nil, "credentials", "create", "--tenant", "beta", "--actions", "compute:nodes:read,compute:nodes:manage", "--out", beta)
	b := newClient(t, reg)
	b.signIn(beta)
	token := b.csrf("/ui/nodes/" + betaNode.ID + "/revoke-certificates")
	revoke := func(id string) page {
		return b.post("/ui/nodes/"+id+"/revoke-certificates", url.Values{"csrf": {token}, "reason": {"beta was here"}})
	}
	if p := revoke(betaNode.ID); p.status != http.StatusSeeOther {
		t.Fatalf("beta revoking its own node's agents (%d):\n%s", p.status, p.body)
	}
	if n := nodeOf(t, reg, "beta", betaNode.ID); n.IdentityEpoch != 1 {
		t.Fatalf("beta's own revocation left its node at epoch %d", n.IdentityEpoch)
	}

	const missing = "nd_00000000deadbeef"
	theirs, none := revoke(acmeNode.ID), revoke(missing)
	if theirs.status != http.StatusNotFound || !strings.Contains(theirs.body, "NOT_FOUND") ||
		strings.ReplaceAll(theirs.body, acmeNode.ID, "ID") != strings.ReplaceAll(none.body, missing, "ID") {
		t.Errorf("beta revoking acme's node answers %d\n%s\nand a missing node %d\n%s", theirs.status, theirs.body, none.status, none.body)
	}
	if n := nodeOf(t, reg, "acme", acmeNode.ID); n.IdentityEpoch != 0 || n.AgentsRevoked != nil || n.Rev != acmeNode.Rev {
		t.Errorf("beta's request changed acme's node: epoch %d, %+v, rev %d (was %d)", n.IdentityEpoch, n.AgentsRevoked, n.Rev, acmeNode.Rev)
	}
}

// siteOf is the site as the API lists it now.
func siteOf(t *testing.T, reg *testkit.Registry, id string) api.Site {
	t.Helper()
	var list api.SiteList
	testkit.JSON(t, reg.AdminConfig, &list, "sites", "list")
	for _, s := range list.Sites {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("no site %s in %+v", id, list.Sites)
	return api.Site{}
}

// siteRevocation is what the sites page shows of site id's agent certificates.
func siteRevocation(t *testing.T, p page, id string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)id="site-` + id + `">.*?class="agent-revoked">(.*?)</dd>`).FindStringSubmatch(p.body)
	if p.status != http.StatusOK || m == nil {
		t.Fatalf("the sites page (%d) shows no agent certificates of %s:\n%s", p.status, id, p.body)
	}
	return regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[1], "")
}

// TestRevokeASiteAgentFromTheSitesPage: the sites page links each site to the
// confirmation of "revoke agent certificate", whose form, sent by a root-tenant session
// with a reason, moves the site's identity epoch through the API and records the reason
// and the session's credential, then goes back to the site on the sites page, which
// shows the revocation. A reason longer than the API takes comes back on the
// confirmation page with the API's answer, and the site stays as it was.
func TestRevokeASiteAgentFromTheSitesPage(t *testing.T) {
	reg, _, _, _ := twoTenants(t)
	rootID := credentialID(t, reg, "root")
	b := newClient(t, reg)
	b.signIn(reg.AdminConfig)
	path := "/ui/sites/rack-a/revoke-certificates"
	if p := b.get("/ui/sites"); !strings.Contains(p.body, `id="action-revoke-certificates-rack-a" href="`+path+`">revoke agent certificate…</a>`) {
		t.Errorf("the sites page offers no revocation of rack-a's agent:\n%s", p.body)
	}
	confirm := b.get(path)
	for _, want := range []string{`name="reason"`, fmt.Sprintf(`maxlength="%d"`, proto.MaxReason), "Yes, revoke agent certificate rack-a", `href="/ui/sites#site-rack-a"`} {
		if confirm.status != http.StatusOK || !strings.Contains(confirm.body, want) {
			t.Fatalf("the confirmation (%d) has no %s:\n%s", confirm.status, want, confirm.body)
		}
	}

	long := strings.Repeat("x", proto.MaxReason+1)
	p := b.post(path, url.Values{"csrf": {b.csrf(path)}, "reason": {long}})
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, "INVALID_INPUT") || !strings.Contains(p.body, `value="`+long+`"`) {
		t.Errorf("a reason too long (%d):\n%s", p.status, p.body)
	}
	if s := siteOf(t, reg, "rack-a"); s.IdentityEpoch != 0 || s.AgentRevoked != nil {
		t.Fatalf("a refused revocation changed the site: epoch %d, %+v", s.IdentityEpoch, s.AgentRevoked)
	}

	p = b.post(path, url.Values{"csrf": {b.csrf(path)}, "reason": {"rack server stolen"}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/sites#site-rack-a" {
		t.Fatalf("the revocation (%d, to %q):\n%s", p.status, p.header.Get("Location"), p.body)
	}
	s := siteOf(t, reg, "rack-a")
	if s.IdentityEpoch != 1 || s.AgentRevoked == nil || s.AgentRevoked.Epoch != 1 || s.AgentRevoked.Reason != "rack server stolen" || s.AgentRevoked.By != rootID {
		t.Fatalf("after the console's revocation the site has epoch %d, revocation %+v", s.IdentityEpoch, s.AgentRevoked)
	}
	got := siteRevocation(t, b.get("/ui/sites"), "rack-a")
	for _, want := range []string{"identity epoch 1 · revoked " + s.AgentRevoked.At.UTC().Format("2006-01-02 15:04:05Z"), "by " + rootID, ": rack server stolen"} {
		if !strings.Contains(got, want) {
			t.Errorf("rack-a's revocation shows %q, without %q", got, want)
		}
	}
}

// TestOnlyTheRootTenantRevokesASiteAgentFromTheConsole: three sessions post the
// revocation of rack-a's agent straight to the form's address, each with what it has:
// tenant acme's credential, which manages sites but is not the platform's, with its own
// session's token; a root-tenant credential that reads nodes and images but does not
// manage sites, with its own token; and the admin's session, which could revoke, without
// the form's token or with a forged one. The first two get the API's FORBIDDEN on the
// confirmation page, the third the console's FORBIDDEN, and rack-a keeps its identity
// epoch throughout.
func TestOnlyTheRootTenantRevokesASiteAgentFromTheConsole(t *testing.T) {
	reg, _, _, _ := twoTenants(t)
	const path = "/ui/sites/rack-a/revoke-certificates"
	unchanged := func(who string) {
		t.Helper()
		if s := siteOf(t, reg, "rack-a"); s.IdentityEpoch != 0 || s.AgentRevoked != nil {
			t.Fatalf("%s's refused revocation changed rack-a: epoch %d, %+v", who, s.IdentityEpoch, s.AgentRevoked)
		}
	}
	session := func(tenant, actions string) *client {
		conf := filepath.Join(t.TempDir(), tenant+".conf")
		testkit.JSON(t, reg.AdminConfig, nil, "credentials", "create", "--tenant", tenant, "--actions", actions, "--out", conf)
		c := newClient(t, reg)
		if p := c.signIn(conf); p.status != http.StatusSeeOther {
			t.Fatalf("sign in to %s: %d\n%s", tenant, p.status, p.body)
		}
		return c
	}

	tenant := session("acme", "compute:sites:manage,compute:nodes:read")
	p := tenant.post(path, url.Values{"csrf": {tenant.csrf(path)}, "reason": {"acme was here"}})
	if p.status != http.StatusForbidden || !strings.Contains(p.body, "FORBIDDEN") || !strings.Contains(p.body, "only the root tenant&#39;s credentials") ||
		!strings.Contains(p.body, `value="acme was here"`) {
		t.Errorf("a tenant's revocation of a site's agent (%d):\n%s", p.status, p.body)
	}
	unchanged("a tenant")

	reader := session("root", "compute:nodes:read,compute:images:read")
	p = reader.post(path, url.Values{"csrf": {reader.csrf(path)}, "reason": {"a reader tries"}})
	if p.status != http.StatusForbidden || !strings.Contains(p.body, "FORBIDDEN") || !strings.Contains(p.body, "compute:sites:manage") ||
		!strings.Contains(p.body, `value="a reader tries"`) {
		t.Errorf("a read-only root credential's revocation (%d):\n%s", p.status, p.body)
	}
	unchanged("a read-only root credential")

	admin := newClient(t, reg)
	admin.signIn(reg.AdminConfig)
	for name, form := range map[string]url.Values{
		"no token":     {"reason": {"forged"}},
		"empty token":  {"csrf": {""}, "reason": {"forged"}},
		"forged token": {"csrf": {tenant.csrf(path)}, "reason": {"forged"}},
	} {
		p := admin.post(path, form)
		if p.status != http.StatusForbidden || !strings.Contains(p.body, "FORBIDDEN") || !strings.Contains(p.body, "token is not this session") {
			t.Errorf("the admin's form with %s (%d):\n%s", name, p.status, p.body)
		}
		unchanged("a form with " + name)
	}
}
