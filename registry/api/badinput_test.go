package api

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/join"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/registry/userdata"
	"github.com/better-compute/better-compute/registry/workflow"
)

// requestOf is the body type of every method, which its fields' bad values are made
// from; a method registered without a row here fails TestBadInputChangesNothing.
var requestOf = map[string]any{
	"tenants.create": CreateTenantRequest{}, "tenants.list": ListRequest{},
	"credentials.create": CreateCredentialRequest{}, "credentials.list": ListCredentialsRequest{}, "credentials.whoami": struct{}{},
	"credentials.revoke": RevokeCredentialRequest{}, "credentials.rotateAdmin": struct{}{},
	"tokens.create": CreateTokenRequest{}, "tokens.revoke": RevokeTokenRequest{}, "tokens.list": ListRequest{},
	"profiles.create": CreateProfileRequest{}, "profiles.get": ProfileKey{}, "profiles.list": ListProfilesRequest{},
	"profiles.validate": ValidateProfileRequest{}, "profiles.render": ProfileKey{}, "profiles.update": UpdateProfileRequest{},
	"profiles.delete": ProfileKey{},
	"images.register": RegisterImageRequest{}, "images.get": GetImageRequest{}, "images.list": ListImagesRequest{}, "images.promote": ImageRequest{},
	"signers.add": AddSignerRequest{}, "signers.revoke": SignerRequest{}, "signers.list": ListSignersRequest{},
	"sites.create": CreateSiteRequest{}, "sites.update": UpdateSiteRequest{}, "sites.list": ListRequest{}, "sites.cachePlan": SiteRequest{},
	"sites.knownMacs": KnownMACsRequest{}, "sites.locations": SiteLocationsRequest{}, "sites.inventory": SiteRequest{},
	"sites.revokeCertificates": RevokeSiteCertificatesRequest{},
	"metal.events":             EventsRequest{}, "metal.attestation": NodeKey{}, "metal.acceptBoot": AcceptBootRequest{}, "metal.inventory": NodeKey{},
	"metal.inspect": TransitionRequest{}, "metal.commission": TransitionRequest{}, "metal.release": TransitionRequest{},
	"metal.retire": TransitionRequest{}, "metal.rescue": TransitionRequest{}, "metal.unrescue": TransitionRequest{},
	"metal.retry": TransitionRequest{}, "metal.cancel": TransitionRequest{}, "metal.remediate": RemediateRequest{},
	"metal.enroll": EnrollRequest{}, "metal.confirmMac": ConfirmMACRequest{}, "metal.updateBmc": UpdateBMCRequest{},
	"metal.get": NodeKey{}, "metal.list": ListNodesRequest{}, "metal.deploy": DeployRequest{},
	"metal.revokeCertificates": RevokeNodeCertificatesRequest{},
	"pools.create":             CreatePoolRequest{}, "pools.get": PoolRequest{}, "pools.update": UpdatePoolRequest{}, "pools.list": ListPoolsRequest{},
	"secrets.put": PutSecretRequest{}, "secrets.list": ListSecretsRequest{}, "secrets.delete": SecretRequest{},
	"userdata.preview": PreviewUserDataRequest{}, "workflows.get": GetWorkflowRequest{},
	joinwire.JoinMethod: joinwire.Request{},
}

// badInputAPI is every method the registry serves, as `serve` registers them, over a
// real bbolt store holding tenant acme with its site, pool, a node, a credential, a
// profile, a secret and a signer, a site's join token, and the root tenant with an
// admin credential.
type badInputAPI struct {
	s         *Server
	api, host *httptest.Server
	admin, db string
	nodeID    string
	// credID and tokenID are an acme credential's and a join token's.
	credID, tokenID string
}

func newBadInputAPI(t *testing.T) *badInputAPI {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Check(); err != nil {
			t.Errorf("the store is not consistent: %v", err)
		}
		st.Close()
	})
	storetest.Fill(t, st)
	n := storetest.Node(t, st, store.Node{MACs: []string{"52:54:00:00:00:01"}})
	a := &badInputAPI{db: filepath.Join(dir, store.FileName), nodeID: n.ID}
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if _, err = tx.CreateTenant(store.RootTenant); err != nil {
			return err
		}
		if _, a.admin, err = tx.CreateCredential(store.RootTenant, []string{ActionAll}, time.Time{}); err != nil {
			return err
		}
		cred, _, err := tx.CreateCredential(storetest.Tenant, []string{ActionNodesRead}, time.Time{})
		if err != nil {
			return err
		}
		tok, _, err := join.MintToken(tx, store.TokenFor{Kind: store.TokenSite, Site: storetest.Site}, time.Hour)
		a.credID, a.tokenID = cred.ID, tok.ID
		return err
	})
	keys, err := pki.Generate(clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	box, err := secret.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	pins := keys.Pins()
	ud, err := userdata.New(userdata.Config{ControlPlaneURL: "https://registry.example:7443", BcdURL: "https://cache.example/bcd",
		BcdSHA256: strings.Repeat("ab", 32), Pins: &pins}, box)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	engine := workflow.New(workflow.Config{Store: st})
	a.s = NewServer(st, log)
	a.s.RegisterAll()
	a.s.RegisterJoin(join.NewService(st, keys, []string{"127.0.0.1:7444"}, log))
	a.s.RegisterUserData(ud)
	a.s.RegisterSecrets(box)
	a.s.RegisterMetal(metal.New(metal.Config{Store: st, Engine: engine}))
	a.s.RegisterWorkflows(engine)
	conf := filepath.Join(dir, "admin.conf")
	a.s.RegisterAdminRotation(AdminConfigWriter{Path: conf, Write: func(c string) error { return writeAdminConf(conf, c) }})
	a.api, a.host = httptest.NewServer(a.s), httptest.NewServer(a.s.HostHandler())
	t.Cleanup(a.api.Close)
	t.Cleanup(a.host.Close)
	a.made(t)
	return a
}

// made makes through the API what the bases name besides: acme's profile p, its profile
// u with user data, its secret bmc and its signer release, and the BMC network of site
// rack-a.
func (a *badInputAPI) made(t *testing.T) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	pub := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: spki}))
	ctx := context.Background()
	api, host := NewHandlerClient(a.s, a.admin), NewHandlerClient(a.s.HostHandler(), "")
	var out map[string]any
	for _, c := range []struct {
		c      *Client
		method string
		req    any
	}{
		{api, "profiles.create", map[string]any{"tenantId": storetest.Tenant, "document": json.RawMessage(`{"id":"p","version":1,"target":"metal","steps":[{"use":"power.getPower"}]}`)}},
		{api, "profiles.create", map[string]any{"tenantId": storetest.Tenant, "document": json.RawMessage(`{"id":"u","version":1,"target":"metal",
			"userData":{"kind":"cloud-init","template":"bcd-host.yaml.hbs"},"steps":[{"use":"power.getPower"}]}`)}},
		{api, "secrets.put", PutSecretRequest{TenantID: storetest.Tenant, Ref: "secret://bmc", Value: []byte("hunter2")}},
		{api, "sites.update", UpdateSiteRequest{SiteID: storetest.Site, BMCNetworks: &[]string{"127.0.0.0/8"}}},
		{host, "signers.add", AddSignerRequest{TenantID: storetest.Tenant, ID: "release", PublicKey: pub}},
	} {
		if err := c.c.Call(ctx, c.method, c.req, &out); err != nil {
			t.Fatalf("%s: %v", c.method, err)
		}
	}
}

// post sends body to method as its caller would: the host's on the admin socket, no
// credential to join.join, the admin credential to the others.
func (a *badInputAPI) post(method string, body []byte) (int, []byte, error) {
	m := a.s.methods[method]
	srv := a.api
	if m.HostOnly {
		srv = a.host
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/"+method, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if !m.HostOnly && !m.Public {
		req.Header.Set("Authorization", "Bearer "+a.admin)
	}
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// bases are a body of each method that names the records the fixture holds, so that
// the one bad field a case puts in it is the body's only fault; a method without a row
// starts from {}. NODE, CRED and TOKEN stand for the node's, a credential's and a join
// token's ids.
var bases = map[string]string{
	"tenants.create":     `{"name":"beta"}`,
	"credentials.create": `{"tenantId":"acme","actions":["compute:nodes:read"]}`,
	"credentials.list":   `{"tenantId":"acme"}`,
	"credentials.revoke": `{"id":"CRED"}`,
	"tokens.create":      `{"kind":"site","site":"rack-a"}`,
	"tokens.revoke":      `{"id":"TOKEN"}`,
	"profiles.create":    `{"tenantId":"acme","document":{"id":"q","version":1,"target":"metal","steps":[{"use":"power.getPower"}]}}`,
	"profiles.get":       `{"tenantId":"acme","id":"p","profileVersion":1}`,
	"profiles.render":    `{"tenantId":"acme","id":"p","profileVersion":1}`,
	"profiles.delete":    `{"tenantId":"acme","id":"p","profileVersion":1}`,
	"profiles.validate":  `{"tenantId":"acme","id":"p","profileVersion":1}`,
	"profiles.update":    `{"tenantId":"acme","id":"p","profileVersion":1,"visibility":"public"}`,
	"profiles.list":      `{"tenantId":"acme"}`,
	"images.register": `{"tenantId":"acme","ref":"os@1","kind":"os","format":"raw","compression":"none","sha256":"` + strings.Repeat("ab", 32) +
		`","sizeBytes":1024,"source":"https://images.example/os.img","signerId":"release","signature":"MEUCIQ=="}`,
	"images.get":               `{"tenantId":"acme","id":"im_0123456789abcdef"}`,
	"images.get ref":           `{"tenantId":"acme","ref":"os@1"}`,
	"images.promote":           `{"tenantId":"acme","id":"im_0123456789abcdef"}`,
	"images.list":              `{"tenantId":"acme"}`,
	"signers.add":              `{"tenantId":"acme","id":"other"}`,
	"signers.revoke":           `{"tenantId":"acme","id":"release"}`,
	"signers.list":             `{"tenantId":"acme"}`,
	"sites.create":             `{"name":"rack-b","bmcNetworks":["10.0.0.0/24"],"imageSources":["https://images.example/"]}`,
	"sites.update":             `{"siteId":"rack-a","imageSources":["https://images.example/"]}`,
	"sites.cachePlan":          `{"siteId":"rack-a"}`,
	"sites.locations":          `{"siteId":"rack-a"}`,
	"sites.inventory":          `{"siteId":"rack-a"}`,
	"sites.knownMacs":          `{"siteId":"rack-a"}`,
	"sites.revokeCertificates": `{"siteId":"rack-a","reason":"stolen"}`,
	"metal.deploy":             `{"tenantId":"acme","nodeId":"NODE","profileId":"p","profileVersion":1}`,
	"metal.remediate":          `{"tenantId":"acme","nodeId":"NODE","profile":"remediate-reboot","profileVersion":1,"reason":"xid 79"}`,
	"metal.confirmMac":         `{"tenantId":"acme","nodeId":"NODE","mac":"52:54:00:00:00:09"}`,
	"metal.updateBmc":          `{"tenantId":"acme","nodeId":"NODE","driver":"redfish","address":"https://127.0.0.2"}`,
	"metal.enroll":             `{"tenantId":"acme","pool":"gpu","macs":["52:54:00:00:00:02"],"bmc":{"driver":"redfish","address":"https://127.0.0.2"}}`,
	"metal.list":               `{"tenantId":"acme"}`,
	"metal.events":             `{"tenantId":"acme","nodeId":"NODE"}`,
	"metal.revokeCertificates": `{"tenantId":"acme","nodeId":"NODE","reason":"key leaked"}`,
	"pools.create":             `{"tenantId":"acme","name":"cpu","siteId":"rack-a"}`,
	"pools.get":                `{"tenantId":"acme","name":"gpu"}`,
	"pools.update":             `{"tenantId":"acme","name":"gpu","prewarmImages":[]}`,
	"pools.list":               `{"tenantId":"acme"}`,
	"secrets.put":              `{"tenantId":"acme","ref":"secret://other","value":"aGk="}`,
	"secrets.delete":           `{"tenantId":"acme","ref":"secret://bmc"}`,
	"secrets.list":             `{"tenantId":"acme"}`,
	"userdata.preview":         `{"tenantId":"acme","id":"u","profileVersion":1,"nodeId":"NODE"}`,
	"workflows.get":            `{"tenantId":"acme","id":"wf_0123456789abcdef"}`,
}

// baseOf is method's base body for a case of field f with the fixture's ids in it, as a
// map: the row "METHOD FIELD" when there is one (a field the base's others exclude).
func (a *badInputAPI) baseOf(t *testing.T, method, f string) map[string]any {
	text := cmpOr(bases[method+" "+f], bases[method], `{}`)
	if _, node := lifecycleMethods[method]; node || slices.Contains([]string{"metal.get", "metal.attestation", "metal.acceptBoot", "metal.inventory"}, method) {
		text = `{"tenantId":"acme","nodeId":"NODE"}`
	}
	text = strings.NewReplacer("NODE", a.nodeID, "CRED", a.credID, "TOKEN", a.tokenID).Replace(text)
	var base map[string]any
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	if err := d.Decode(&base); err != nil {
		t.Fatal(err)
	}
	return base
}

// badBody is a body that must be refused; path, when set, is where the answer must
// say the fault is (a prefix of its path: steps[2] covers steps[2].timeout).
type badBody struct {
	name string
	body []byte
	path string
	// mayPass lets the body be accepted, when the store keeps nothing of it: a filter
	// or a cursor that matches nothing.
	mayPass bool
	// anyCode lets an answer other than INVALID_INPUT stand, INVALID_INPUT still at the
	// field and NOT_FOUND at a field (a version not found is at the id it goes with):
	// a value of the field's type whose fault the method finds.
	anyCode bool
}

// mib is a string of 1 MiB.
var mib = strings.Repeat("x", 1<<20)

// wholeBodies are bodies every method must refuse INVALID_INPUT, whatever its fields.
func wholeBodies() []badBody {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	return []badBody{
		{name: "not JSON", body: []byte(`name=acme`)},
		{name: "cut short", body: []byte(`{"a":`)},
		{name: "an array", body: []byte(`[{}]`)},
		{name: "a string", body: []byte(`"{}"`)},
		{name: "a number", body: []byte(`1`)},
		{name: "a bool", body: []byte(`true`)},
		{name: "two objects", body: []byte(`{} {}`)},
		{name: "an unknown field", body: []byte(`{"noSuchField":1}`), path: "noSuchField"},
		{name: "a field of another case", body: []byte(`{"NODEID":"x"}`), path: "NODEID"},
		{name: "an unknown field of 1 MiB", body: []byte(`{"noSuchField":"` + mib + `"}`), path: "noSuchField"},
		{name: "an unknown key of 1 MiB", body: []byte(`{"` + mib + `":1}`)},
		{name: "an invalid UTF-8 key", body: []byte("{\"\xff\xfe\":1}")},
		{name: "a NUL", body: []byte("{\"a\x00\":1}")},
		{name: "deeply nested", body: []byte(`{"noSuchField":` + deep + `}`)},
		{name: "deeply nested alone", body: []byte(deep)},
		{name: "a lone surrogate key", body: []byte(`{"\ud800":1}`)},
		{name: "over the body's bound", body: []byte(`{"noSuchField":"` + strings.Repeat("x", 3<<20) + `"}`)},
	}
}

// field is one field of a request body as its JSON shows it: its path, its type and
// whether the body may leave it out.
type field struct {
	path     string
	typ      reflect.Type
	optional bool
}

var (
	timeType   = reflect.TypeFor[time.Time]()
	rawType    = reflect.TypeFor[json.RawMessage]()
	docType    = reflect.TypeFor[Document]()
	unmarshals = reflect.TypeFor[json.Unmarshaler]()
)

// fieldsOf lists the JSON fields of a request type under prefix, embedded structs'
// fields with them and nested structs' fields after their own.
func fieldsOf(typ reflect.Type, prefix string) []field {
	var out []field
	for f := range typ.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			out = append(out, fieldsOf(ft, prefix)...)
			continue
		}
		path := prefix + cmpOr(name, f.Name)
		// An empty tenantId is the caller's own tenant.
		optional := strings.Contains(opts, "omit") || f.Type.Kind() == reflect.Pointer || name == "tenantId"
		out = append(out, field{path: path, typ: ft, optional: optional})
		if ft.Kind() == reflect.Struct && ft != timeType && !reflect.PointerTo(ft).Implements(unmarshals) {
			out = append(out, fieldsOf(ft, path+".")...)
		}
	}
	return out
}

func cmpOr(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// idLike tells the fields that name a record, whose value has a shape.
func idLike(path string) bool {
	name := path[strings.LastIndex(path, ".")+1:]
	return name == "id" || strings.HasSuffix(name, "Id") || slices.Contains([]string{"name", "site", "ref", "mac", "pool", "profile"}, name)
}

// put is base with the value at path set to raw JSON text (which may be no valid JSON:
// invalid UTF-8, a key twice).
func put(base map[string]any, path, raw string) []byte {
	const mark = "\x00VALUE\x00"
	body := cloneMap(base)
	keys := strings.Split(path, ".")
	m := body
	for _, k := range keys[:len(keys)-1] {
		inner, ok := m[k].(map[string]any)
		if !ok {
			inner = map[string]any{}
		}
		inner = cloneMap(inner)
		m[k] = inner
		m = inner
	}
	m[keys[len(keys)-1]] = mark
	text, _ := json.Marshal(body)
	return bytes.Replace(text, []byte(`"\u0000VALUE\u0000"`), []byte(raw), 1)
}

func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// fieldBodies are base with field f of a bad value: of another JSON type (refused at f
// by the decoder), or of its type but one no method takes (a number out of range, an
// empty or 1 MiB string, an id of no shape), or given twice.
func fieldBodies(base map[string]any, f field) []badBody {
	key := f.path[strings.LastIndex(f.path, ".")+1:]
	one := func(name, v string) badBody {
		return badBody{name: f.path + " " + name, body: put(base, f.path, v), path: f.path}
	}
	// valued is a value of the field's type the method must judge.
	valued := func(name, v string) badBody {
		b := one(name, v)
		b.anyCode, b.mayPass = true, f.optional
		return b
	}
	unsigned := f.typ.Kind() >= reflect.Uint && f.typ.Kind() <= reflect.Uintptr
	var out []badBody
	switch k := f.typ.Kind(); {
	case f.typ == rawType || f.typ == docType || k == reflect.Interface:
		return nil
	case f.typ == timeType:
		out = append(out, one("not a time", `"yesterday"`), one("a number", `1`))
	case k == reflect.String:
		out = append(out, one("a number", `1`), one("an object", `{}`), one("an array", `["x"]`),
			one("invalid UTF-8", "\"\xff\""), valued("of 1 MiB", `"`+mib+`"`))
		if idLike(f.path) {
			out = append(out, valued("of no shape", `"../a b\u0000"`))
			if !f.optional {
				out = append(out, valued("empty", `""`))
			}
		}
	case k == reflect.Bool:
		out = append(out, one("a string", `"true"`), one("a number", `1`))
	case k >= reflect.Int && k <= reflect.Uintptr:
		out = append(out, one("a string", `"1"`), one("a fraction", `1.5`), one("past int64", `99999999999999999999999`),
			one("1e400", `1e400`), one("the largest int64 and one", `9223372036854775808`))
		if unsigned {
			out = append(out, one("negative", `-1`))
		} else {
			out = append(out, valued("negative", `-1`), valued("the smallest int64", fmt.Sprint(int64(math.MinInt64))))
		}
		out = append(out, valued("the largest int64", fmt.Sprint(int64(math.MaxInt64))))
	case k == reflect.Slice:
		out = append(out, one("a string", `"x"`), one("an object", `{}`))
		if f.typ.Elem().Kind() == reflect.String {
			out = append(out, badBody{name: f.path + " an element of another type", body: put(base, f.path, `[{}]`), path: f.path + "[0]"},
				valued("an element of 1 MiB", `["`+mib+`"]`))
		}
	case k == reflect.Map || k == reflect.Struct:
		out = append(out, one("a string", `"x"`), one("an array", `[]`))
	}
	return append(out, one("twice", `null,"`+key+`":null`))
}

// TestBadInputChangesNothing sends every method the registry serves (enumerated from
// the server's methods, as `serve` registers them) bodies that are not a JSON object,
// of unknown fields, duplicate keys, invalid UTF-8, deep nesting, and each of its fields
// (nested ones too) of another type or of a value out of its range, in a body otherwise
// naming records that exist. Each is refused with the documented code at its HTTP
// status (never INTERNAL, never a connection closed without an answer), naming the
// offending field's path when the fault is a field, and the store's file is byte for
// byte as it was.
func TestBadInputChangesNothing(t *testing.T) {
	a := newBadInputAPI(t)
	methods := slices.Sorted(func(yield func(string) bool) {
		for name := range a.s.methods {
			if !yield(name) {
				return
			}
		}
	})
	for _, method := range methods {
		t.Run(method, func(t *testing.T) {
			req, ok := requestOf[method]
			if !ok {
				t.Fatalf("%s has no request type in requestOf: add it, so its fields are tried", method)
			}
			bodies := wholeBodies()
			for _, f := range fieldsOf(reflect.TypeOf(req), "") {
				for _, b := range fieldBodies(a.baseOf(t, method, f.path), f) {
					bodies = append(bodies, b)
				}
			}
			for _, b := range bodies {
				a.refused(t, method, b)
			}
		})
	}
}

// refused sends b to method and checks it is refused as the API documents, and that
// the store did not change.
func (a *badInputAPI) refused(t *testing.T, method string, b badBody) {
	t.Helper()
	before, err := os.ReadFile(a.db)
	if err != nil {
		t.Fatal(err)
	}
	status, data, err := a.post(method, b.body)
	if err != nil {
		t.Errorf("%s: no answer: %v", b.name, err)
		return
	}
	after, err := os.ReadFile(a.db)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("%s: the store changed (answered %d %.200s)", b.name, status, data)
	}
	if status == http.StatusOK {
		if !b.mayPass {
			t.Errorf("%s: accepted: %.200s", b.name, data)
		}
		return
	}
	var e proto.Error
	if err := json.Unmarshal(data, &e); err != nil || e.Code == "" {
		t.Errorf("%s: answered %d %.200q, not a proto error", b.name, status, data)
		return
	}
	if e.Code == proto.Internal || status >= 500 {
		t.Errorf("%s: answered %d %s %.300s", b.name, status, e.Code, e.Message)
		return
	}
	if len(e.Message) > proto.MaxErrorMessage {
		t.Errorf("%s: a message of %d bytes: %.300s", b.name, len(e.Message), e.Message)
	}
	if status == http.StatusRequestEntityTooLarge && e.Code == proto.InvalidInput {
		return // the body as a whole is over its bound, whatever it holds
	}
	if status != e.Code.HTTPStatus() {
		t.Errorf("%s: %s answered with HTTP %d, not %d", b.name, e.Code, status, e.Code.HTTPStatus())
	}
	at := e.Details.Path
	named := b.path != "" && (at == b.path || strings.HasPrefix(at, b.path+".") || strings.HasPrefix(at, b.path+"["))
	switch {
	case b.path == "" && e.Code != proto.InvalidInput:
		t.Errorf("%s: %s %.300s, want INVALID_INPUT", b.name, e.Code, e.Message)
	case b.path == "":
	case !b.anyCode && (e.Code != proto.InvalidInput || !named):
		t.Errorf("%s: %s at %q (%.300s), want INVALID_INPUT at %s", b.name, e.Code, at, e.Message, b.path)
	case b.anyCode && e.Code == proto.InvalidInput && !named:
		t.Errorf("%s: %s at %q (%.300s), want it at %s", b.name, e.Code, at, e.Message, b.path)
	case b.anyCode && e.Code == proto.NotFound && at == "":
		t.Errorf("%s: %s naming no field (%.300s), want it at %s", b.name, e.Code, e.Message, b.path)
	}
}
