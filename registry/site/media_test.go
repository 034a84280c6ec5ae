package site

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// The hosts of TestExpandMediaInsert: the site lets its machines fetch from isos.example
// and mirror.example; pool narrow of acme narrows that to mirror.example; internal is a
// host inside the platform's network that acme names.
const (
	allowedISO  = "https://isos.example/x.iso"
	mirrorISO   = "https://mirror.example/x.iso"
	internalISO = "https://10.0.0.9/admin/export.iso"
)

func TestExpandMediaInsert(t *testing.T) {
	st := openStore(t)
	key := openssl.Generate(t, openssl.Ed25519)
	var node, narrow store.Node
	var run store.Run
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if _, err = tx.SetSiteImageSources(storetest.Site, []string{"isos.example", "mirror.example"}); err != nil {
			return err
		}
		if _, err = tx.CreatePool(store.Pool{Tenant: storetest.Tenant, Name: "narrow", Site: storetest.Site,
			Policy: store.PoolPolicy{ImageSources: []string{"mirror.example"}}}); err != nil {
			return err
		}
		if node, err = tx.CreateNode(store.Node{Tenant: storetest.Tenant, Pool: storetest.Pool, MACs: []string{"52:54:00:00:00:01"}}); err != nil {
			return err
		}
		if narrow, err = tx.CreateNode(store.Node{Tenant: storetest.Tenant, Pool: "narrow", MACs: []string{"52:54:00:00:00:02"}}); err != nil {
			return err
		}
		if _, err = image.AddSigner(tx, storetest.Tenant, "acme-key", key.PublicPEM); err != nil {
			return err
		}
		for ref, source := range map[string]string{"rescue@1": allowedISO, "export@1": internalISO} {
			img := store.Image{Kind: proto.KindOS, Ref: ref, Format: proto.FormatISO, Compression: proto.CompressionNone, SHA256: strings.Repeat("ab", 32)}
			req := image.RegisterRequest{Ref: ref, Kind: img.Kind, Format: img.Format, Compression: img.Compression, SHA256: img.SHA256, SizeBytes: new(int64(1 << 20)),
				Source: source, SignerID: "acme-key", Signature: base64.StdEncoding.EncodeToString(key.Sign(t, image.SigningInput(img)))}
			if _, err = image.Register(tx, image.Allowlist{}, storetest.Tenant, req); err != nil {
				return err
			}
		}
		// steps[1] to steps[4] stand for a step whose result a tenant answers (its own
		// machine's agent); steps[2] to steps[4] name an allowed host, with what a url
		// in a profile may not carry.
		long, _ := json.Marshal(allowedISO + "?pad=" + strings.Repeat("a", 64<<10))
		run, err = tx.CreateRun(store.Run{Node: node.ID, Tenant: storetest.Tenant, Document: json.RawMessage(`{}`), Steps: []store.RunStep{
			{Phase: "main", Index: 0, Use: "plugin.buildIso", Result: json.RawMessage(`{"url":"https://isos.example/n1.iso"}`)},
			{Phase: "main", Index: 1, Use: "inventory.refresh", Result: json.RawMessage(`{"url":"` + internalISO + `"}`)},
			{Phase: "main", Index: 2, Use: "inventory.refresh", Result: json.RawMessage(`{"url":"https://10.0.0.9:443@isos.example/x.iso"}`)},
			{Phase: "main", Index: 3, Use: "inventory.refresh", Result: json.RawMessage(`{"url":` + string(long) + `}`)},
			{Phase: "main", Index: 4, Use: "inventory.refresh", Result: json.RawMessage(`{"url":"https://isos.example/x.iso\tY"}`)},
			{Phase: "main", Index: 5, Use: "media.insert"}}})
		return err
	})
	for name, tc := range map[string]struct {
		kind, with string
		narrow     bool   // the node of pool narrow
		want       string // the expanded input, when no error
		code       proto.Code
		path       string
		says       []string // what a refusal's message says
	}{
		"url":                   {kind: proto.CommandMediaInsert, with: `{"url":"` + allowedISO + `"}`, want: `{"url":"` + allowedISO + `"}`},
		"plain http":            {kind: proto.CommandMediaInsert, with: `{"url":"http://isos.example/x.iso"}`, code: proto.InvalidInput, path: "with.url"},
		"unknown field":         {kind: proto.CommandMediaInsert, with: `{"uri":"https://x"}`, code: proto.InvalidInput, path: "with.uri"},
		"fromStep":              {kind: proto.CommandMediaInsert, with: `{"fromStep":"steps[0]"}`, want: `{"url":"https://isos.example/n1.iso"}`},
		"fromStep no url":       {kind: proto.CommandMediaInsert, with: `{"fromStep":"steps[5]"}`, code: proto.InvalidInput, path: "with.fromStep"},
		"unknown image":         {kind: proto.CommandMediaInsert, with: `{"image":"nope@1"}`, code: proto.NotFound, path: "with.image"},
		"image":                 {kind: proto.CommandMediaInsert, with: `{"image":"rescue@1"}`, want: `{"url":"` + allowedISO + `","digest":"` + strings.Repeat("ab", 32) + `","macs":["52:54:00:00:00:01"]}`},
		"another command":       {kind: "power.setPower", with: `{"action":"on"}`, want: `{"action":"on"}`},
		"a pool's allowed host": {kind: proto.CommandMediaInsert, narrow: true, with: `{"url":"` + mirrorISO + `"}`, want: `{"url":"` + mirrorISO + `"}`},

		// The attacks: a URL of acme's own writing on a host the site does not allow.
		"url on an internal host": {kind: proto.CommandMediaInsert, with: `{"url":"` + internalISO + `"}`, code: proto.Forbidden, path: "with.url",
			says: []string{"10.0.0.9:443", "site rack-a", "better-compute sites update rack-a --image-sources"}},
		"url on another port of an allowed host": {kind: proto.CommandMediaInsert, with: `{"url":"https://isos.example:8443/x.iso"}`, code: proto.Forbidden, path: "with.url",
			says: []string{"isos.example:8443"}},
		"an iso whose source is an internal host": {kind: proto.CommandMediaInsert, with: `{"image":"export@1"}`, code: proto.Forbidden, path: "with.image",
			says: []string{"export@1", "10.0.0.9:443", "site rack-a"}},
		"a step that returned an internal url": {kind: proto.CommandMediaInsert, with: `{"fromStep":"steps[1]"}`, code: proto.Forbidden, path: "with.fromStep",
			says: []string{"steps[1]", "10.0.0.9:443", "site rack-a"}},
		// An earlier step's url is held to the rule of a profile's url: with user
		// information (which a BMC's parser may take for the host), past 2048 bytes, or
		// with a space or control character, it is refused before anything is delivered.
		"a step that returned a url with user information": {kind: proto.CommandMediaInsert, with: `{"fromStep":"steps[2]"}`, code: proto.InvalidInput, path: "with.fromStep",
			says: []string{"steps[2]", "user info"}},
		"a step that returned a url of 64 KiB": {kind: proto.CommandMediaInsert, with: `{"fromStep":"steps[3]"}`, code: proto.InvalidInput, path: "with.fromStep",
			says: []string{"steps[3]", "2048"}},
		"a step that returned a url with a tab": {kind: proto.CommandMediaInsert, with: `{"fromStep":"steps[4]"}`, code: proto.InvalidInput, path: "with.fromStep",
			says: []string{"steps[4]", "not an https URL"}},
		// A profile's url is held to the same rule once more as it is delivered: a version
		// stored before the rule may hold what the check now refuses, on a host the site
		// allows (isos.example, after the user information).
		"a stored profile's url with user information": {kind: proto.CommandMediaInsert, with: `{"url":"https://10.0.0.9:443@isos.example/x.iso"}`, code: proto.InvalidInput, path: "with.url",
			says: []string{"user info", "profiles validate"}},
		"a host the pool leaves out": {kind: proto.CommandMediaInsert, narrow: true, with: `{"url":"` + allowedISO + `"}`, code: proto.Forbidden, path: "with.url",
			says: []string{"isos.example:443", "site rack-a", "pool narrow's policy.imageSources [mirror.example]", "better-compute pools update narrow"}},
	} {
		t.Run(name, func(t *testing.T) {
			n := node
			if tc.narrow {
				n = narrow
			}
			payload, _ := json.Marshal(proto.SiteCommand{Node: n.ID, Input: json.RawMessage(tc.with)})
			var got proto.Command
			err := st.View(func(tx *store.Tx) (err error) {
				got, err = ExpandMediaInsert(tx, proto.Command{ID: run.ID + ":main.5:a1", Kind: tc.kind, Payload: payload}, nil)
				return err
			})
			if tc.code != "" {
				if err == nil {
					t.Fatalf("expanded to %s, want %s at %s", got.Payload, tc.code, tc.path)
				}
				e := proto.AsError(err)
				if e.Code != tc.code || e.Details.Path != tc.path || (tc.code == proto.Forbidden) != (e.Details.Reason == proto.ReasonSourceNotAllowed) {
					t.Fatalf("got %v, want %s at %s", err, tc.code, tc.path)
				}
				for _, want := range tc.says {
					if !strings.Contains(e.Message, want) {
						t.Errorf("the message does not say %q: %s", want, e.Message)
					}
				}
				if strings.Contains(e.Message, "mirror.example") && !tc.narrow {
					t.Errorf("the message shows the tenant the site's image sources: %s", e.Message)
				}
				return
			}
			var sc proto.SiteCommand
			if err != nil || json.Unmarshal(got.Payload, &sc) != nil || string(sc.Input) != tc.want {
				t.Fatalf("got %s, %v; want input %s", got.Payload, err, tc.want)
			}
		})
	}
}
