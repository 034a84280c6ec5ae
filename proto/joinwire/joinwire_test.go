package joinwire

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestSealOpen(t *testing.T) {
	key, _ := ecdh.X25519().GenerateKey(rand.Reader)
	other, _ := ecdh.X25519().GenerateKey(rand.Reader)
	aad := AAD("node-1", RoleNode, []byte("spki"))
	sealed, err := SealToken(key.PublicKey(), aad, "bcj_secret")
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), sealed...)
	flipped[len(flipped)-1] ^= 1
	cases := map[string]struct {
		key    *ecdh.PrivateKey
		aad    []byte
		sealed []byte
		want   string
	}{
		"opens":            {key, aad, sealed, "bcj_secret"},
		"another key":      {other, aad, sealed, ""},
		"another node id":  {key, AAD("node-2", RoleNode, []byte("spki")), sealed, ""},
		"another role":     {key, AAD("node-1", RoleSite, []byte("spki")), sealed, ""},
		"another key spki": {key, AAD("node-1", RoleNode, []byte("spkj")), sealed, ""},
		"tampered":         {key, aad, flipped, ""},
		"truncated":        {key, aad, sealed[:40], ""},
		"only enc":         {key, aad, sealed[:32], ""},
		"empty":            {key, aad, nil, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := OpenToken(tc.key, tc.aad, tc.sealed)
			if tc.want == "" {
				if !errors.Is(err, ErrUnsealed) {
					t.Fatalf("got %q, %v; want ErrUnsealed", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestPins(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	pin, err := Pin(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPin(pin); err != nil {
		t.Errorf("CheckPin(%q): %v", pin, err)
	}
	if !MatchPin(pin, pub) {
		t.Errorf("MatchPin: the key's own pin does not match")
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if MatchPin(pin, other) {
		t.Errorf("MatchPin: another key matches")
	}
	for name, bad := range map[string]string{
		"empty":      "",
		"no prefix":  strings.TrimPrefix(pin, "sha256/"),
		"sha1":       "sha1/" + strings.TrimPrefix(pin, "sha256/"),
		"short":      pin[:20],
		"not base64": "sha256/!!!!",
	} {
		if CheckPin(bad) == nil {
			t.Errorf("%s: CheckPin(%q) accepted it", name, bad)
		}
	}
}

func TestJWK(t *testing.T) {
	key, _ := ecdh.X25519().GenerateKey(rand.Reader)
	data, _ := json.Marshal(NewJWK(key.PublicKey()))
	got, err := ParseJWK(data)
	if err != nil || !got.Equal(key.PublicKey()) {
		t.Fatalf("round trip: %v", err)
	}
	x := NewJWK(key.PublicKey()).X
	for name, bad := range map[string]string{
		"wrong kty":     `{"kty":"EC","crv":"X25519","x":"` + x + `"}`,
		"wrong crv":     `{"kty":"OKP","crv":"Ed25519","x":"` + x + `"}`,
		"short x":       `{"kty":"OKP","crv":"X25519","x":"AAAA"}`,
		"padded x":      `{"kty":"OKP","crv":"X25519","x":"` + x + `="}`,
		"unknown field": `{"kty":"OKP","crv":"X25519","x":"` + x + `","d":"AAAA"}`,
		"trailing":      `{"kty":"OKP","crv":"X25519","x":"` + x + `"} {}`,
		"not json":      `kty=OKP`,
		// encoding/json took the last of two keys, another reader may take the first.
		"x twice": `{"kty":"OKP","crv":"X25519","x":"AAAA","x":"` + x + `"}`,
	} {
		if _, err := ParseJWK([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A field the JWK does not have is named by its path.
	_, err = ParseJWK([]byte(`{"kty":"OKP","crv":"X25519","x":"` + x + `","d":"AAAA"}`))
	if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "d" {
		t.Errorf("unknown field: %v (path %q), want INVALID_INPUT at d", err, e.Details.Path)
	}
}

func TestSignVerifyResponse(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	want := Payload{Version: Version, NodeID: "n1", Role: RoleNode, Certificate: "C", AgentCA: "A", AgentEndpoint: "h:1"}
	resp, err := SignResponse(priv, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyResponse(pub, resp)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
	payload, _ := base64.StdEncoding.DecodeString(resp.Payload)
	swapped := strings.Replace(string(payload), `"n1"`, `"n2"`, 1)
	cases := map[string]struct {
		pub  ed25519.PublicKey
		resp Response
	}{
		"another key":      {other, resp},
		"payload changed":  {pub, Response{Payload: base64.StdEncoding.EncodeToString([]byte(swapped)), Signature: resp.Signature}},
		"no signature":     {pub, Response{Payload: resp.Payload}},
		"signature base64": {pub, Response{Payload: resp.Payload, Signature: "%%%"}},
		"payload base64":   {pub, Response{Payload: "%%%", Signature: resp.Signature}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := VerifyResponse(tc.pub, tc.resp); err == nil {
				t.Fatal("verified")
			}
		})
	}
}

func TestParseWellKnown(t *testing.T) {
	doc, ca := testDocument(t)
	good, _ := json.Marshal(doc)
	a, err := ParseWellKnown(good)
	if err != nil {
		t.Fatal(err)
	}
	if !a.ServingCA.Equal(ca) || a.AgentEndpoint != doc.AgentEndpoint {
		t.Errorf("anchors: %+v", a)
	}
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	notCA := selfSigned(t, leafKey, false)
	ecKeyDER, _ := x509.MarshalPKIXPublicKey(leafKey.Public())
	ecKeyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecKeyDER}))
	cases := map[string]func(d *WellKnown){
		"version 2":          func(d *WellKnown) { d.Version = 2 },
		"no CA":              func(d *WellKnown) { d.ServingCA = "" },
		"CA not a CA":        func(d *WellKnown) { d.ServingCA = notCA },
		"two CAs":            func(d *WellKnown) { d.ServingCA += d.ServingCA },
		"ECDSA signing key":  func(d *WellKnown) { d.JoinSigningKey = ecKeyPEM },
		"no signing key":     func(d *WellKnown) { d.JoinSigningKey = "" },
		"bad encryption key": func(d *WellKnown) { d.JoinEncryptionKey.Crv = "P-256" },
		"bad endpoint":       func(d *WellKnown) { d.AgentEndpoint = "no-port" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			d := doc
			mutate(&d)
			data, _ := json.Marshal(d)
			if _, err := ParseWellKnown(data); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// testDocument makes a well-formed well-known document with fresh keys.
func testDocument(t testing.TB) (WellKnown, *x509.Certificate) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caPEM := selfSigned(t, caKey, true)
	ca, _ := ParseCertificatePEM(caPEM)
	sign, _, _ := ed25519.GenerateKey(rand.Reader)
	signPEM, _ := SigningKeyPEM(sign)
	enc, _ := ecdh.X25519().GenerateKey(rand.Reader)
	return WellKnown{Version: Version, ServingCA: caPEM, JoinSigningKey: signPEM, JoinEncryptionKey: NewJWK(enc.PublicKey()), AgentEndpoint: "127.0.0.1:7444"}, ca
}

func selfSigned(t testing.TB, key *ecdsa.PrivateKey, isCA bool) string {
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: isCA, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
