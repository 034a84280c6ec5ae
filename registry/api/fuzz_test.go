package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// FuzzServe sends any request to the API over a real store, on the admin socket (every
// method's body is decoded) or with any bearer credential: every answer is JSON, a
// success or a proto error whose HTTP status is its code's, never INTERNAL; a path
// that names no method, or a method other than POST, is NOT_FOUND.
func FuzzServe(f *testing.F) {
	_, s := serve(f)
	host := s.HostHandler()
	for _, c := range []struct{ method, name, body string }{
		{"POST", "tenants.list", `{}`},
		{"POST", "tenants.create", `{"name":"acme"}`},
		{"POST", "sites.create", `{"name":"lab","bmcNetworks":["10.0.0.0/24"],"imageSources":["*.example.com"]}`},
		{"POST", "sites.update", `{"siteId":"lab","bmcNetworks":[]}`},
		{"POST", "profiles.validate", `{"document":{"id":"p","version":1,"target":"metal","steps":[]}}`},
		{"POST", "images.get", `{"ref":"os@2026.09+Build1"}`},
		{"POST", "images.list", `{"cursor":"!!","limit":201}`},
		{"POST", "credentials.create", `{"tenantId":"acme","actions":["*"],"name":"x"}`},
		{"POST", "metal.events", `{"nodeId":"nd_1","afterSeq":3,"cursor":"AAAA","wait":true}`},
		{"GET", "tenants.list", ``},
		{"POST", "no.such", `{}`},
		{"POST", "tenants.create", `{"name":"a","name":"b"}`},
	} {
		f.Add(c.method, "/v1/"+c.name, "application/json", []byte(c.body), true, "")
	}
	f.Add("POST", "/v1/tenants.list", "text/plain", []byte(`{}`), false, "Bearer bc_x")
	f.Add("POST", "/v1/tenants.list", "application/json; charset=UTF-8", []byte(`{}`), false, "")
	f.Fuzz(func(t *testing.T, method, path, contentType string, body []byte, onHost bool, auth string) {
		r := &http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body)),
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		r = r.WithContext(t.Context())
		r.Header.Set("Content-Type", contentType)
		r.Header.Set("Authorization", auth)
		w := httptest.NewRecorder()
		if onHost {
			host.ServeHTTP(w, r)
		} else {
			s.ServeHTTP(w, r)
		}
		if w.Header().Get("Content-Type") != "application/json" || !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %q answers %d %q, not JSON", method, path, w.Code, w.Body)
		}
		if w.Code == http.StatusOK {
			return
		}
		var e proto.Error
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code == "" || e.Message == "" {
			t.Fatalf("%s %q answers %d %q, not a proto error", method, path, w.Code, w.Body)
		}
		if e.Code == proto.Internal {
			t.Fatalf("%s %q %q: INTERNAL %s", method, path, body, e.Message)
		}
		if w.Code != e.Code.HTTPStatus() && w.Code != http.StatusUnsupportedMediaType && w.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("%s answered with HTTP %d", e.Code, w.Code)
		}
		name, ok := strings.CutPrefix(path, "/v1/")
		if _, known := s.methods[name]; (!ok || !known || method != http.MethodPost) && e.Code != proto.NotFound {
			t.Fatalf("%s %q answers %s, not NOT_FOUND", method, path, e.Code)
		}
	})
}

// requestTypes are bodies of the API's methods, decoded by DecodeStrict.
var requestTypes = []any{
	CreateTenantRequest{}, ListRequest{}, CreateCredentialRequest{}, RevokeCredentialRequest{}, CreateTokenRequest{},
	CreateSiteRequest{}, UpdateSiteRequest{}, CreateProfileRequest{}, UpdateProfileRequest{}, ValidateProfileRequest{},
	RegisterImageRequest{}, GetImageRequest{}, ListImagesRequest{}, AddSignerRequest{}, PutSecretRequest{},
	EnrollRequest{}, UpdateBMCRequest{}, ListNodesRequest{}, DeployRequest{}, TransitionRequest{},
	CreatePoolRequest{}, UpdatePoolRequest{}, PreviewUserDataRequest{}, GetWorkflowRequest{},
	EventsRequest{}, RevokeNodeCertificatesRequest{}, RevokeSiteCertificatesRequest{},
}

// FuzzDecodeStrict decodes any body into each request type: a refusal is INVALID_INPUT,
// and an accepted body's value encodes to a body that decodes to the same value.
func FuzzDecodeStrict(f *testing.F) {
	for i, s := range []string{
		`{"name":"acme"}`, `{"cursor":"abc","limit":10}`, `{"tenantId":"acme","actions":["nodes.read"],"expiresIn":"24h"}`,
		`{"name":"lab","bmcNetworks":["10.0.0.0/24"]}`, `{"siteId":"lab","imageSources":[]}`,
		`{"document":{"id":"p","version":1}}`, `{"ref":"os@1","id":""}`, `{"Name":"acme"}`, `{"name":"a","name":"b"}`, ``, `null`, `[]`,
	} {
		f.Add(uint8(i), []byte(s))
	}
	// Driver bindings, which check their own shape (jsondoc.Shaper), well formed and not.
	enroll := uint8(slices.IndexFunc(requestTypes, func(v any) bool { _, ok := v.(EnrollRequest); return ok }))
	for _, s := range []string{`{"drivers":{"power":"redfish","boot":{"driver":"ipxe","config":{"a":1}}}}`,
		`{"drivers":{"power":5}}`, `{"drivers":{"power":["ipmi"]}}`, `{"drivers":{"power":{"driver":7,"x":1}}}`} {
		f.Add(enroll, []byte(s))
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		typ := reflect.TypeOf(requestTypes[int(which)%len(requestTypes)])
		v := reflect.New(typ)
		if err := DecodeStrict(body, v.Interface()); err != nil {
			if proto.CodeOf(err) != proto.InvalidInput {
				t.Fatalf("%s: error %v is not INVALID_INPUT", typ, err)
			}
			return
		}
		text, err := json.Marshal(v.Interface())
		if err != nil {
			t.Fatalf("%s decoded from %q does not encode: %v", typ, body, err)
		}
		again := reflect.New(typ)
		if err := DecodeStrict(text, again.Interface()); err != nil {
			t.Fatalf("%s: its own encoding %s is refused: %v", typ, text, err)
		}
		if second, _ := json.Marshal(again.Interface()); !bytes.Equal(text, second) {
			t.Fatalf("%s encodes %s, then %s", typ, text, second)
		}
	})
}
